// main.cpp — fp4lab's entry point. Exit codes: 0 success, 1 a failed run or internal error,
// 2 bad input: a usage error, or a fp4::UserError (base/user_error.h) thrown by a module with its
// one-line explanation. This is the one place user errors become exit 2: anything else that
// escapes (a library's std::invalid_argument included) is a failure, exit 1.
#include <cstdio>
#include <exception>

#include "base/user_error.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"fp4lab: how much does a 4-bit training recipe cost against BF16, and how does it scale"};
  app.set_version_flag("--version", std::string("fp4lab ") + FP4LAB_VERSION);
  app.require_subcommand(1);
  fp4::cli::register_quant_commands(app);
  fp4::cli::register_data_commands(app);
  fp4::cli::register_train_commands(app);
  fp4::cli::register_sweep_commands(app);
  fp4::cli::register_fit_commands(app);
  fp4::cli::register_plan_commands(app);
  fp4::cli::register_report_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "fp4lab: error: %s (see fp4lab --help)\n", e.what());
    return 2;
  } catch (const fp4::UserError& e) {
    std::fprintf(stderr, "fp4lab: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4lab: failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
