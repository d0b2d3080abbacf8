// train_commands.cpp — `fp4lab train`: options in, engine/run/trainer out.
//
// Exit codes (docs/train.md): 0 succeeded, 3 diverged (a result, recorded in status.json), 1 the
// run failed, 2 bad input, 75 the directory is locked by another process, 128 + signal when
// SIGTERM/SIGINT stopped it (a checkpoint was written; --resume continues). main() maps
// exceptions to 1 and 2; the others leave through std::exit once the trainer has closed every
// file it opened.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "base/directory_lock.h"
#include "base/user_error.h"
#include "cli/commands.h"
#include "cli/number_options.h"
#include "engine/run/config.h"
#include "engine/run/rank_launcher.h"
#include "engine/run/ranks.h"
#include "engine/run/run_dir.h"
#include "engine/run/trainer.h"

namespace fp4::cli {

namespace {

struct TrainCliOptions {
  std::string config;
  std::string dir;
  bool resume = false;
  bool quiet = false;
  bool print_config = false;
  int64_t stop_after = -1;
  std::string device;  // empty: the config's, or picked (run::pick_device)
  int64_t gpus = 0;    // 0: the config's
};

// `fp4lab train --gpus N` (N > 1) without RANK in the environment: N rank processes of this same
// command, started and watched by the launcher; this process ends as the run did.
[[noreturn]] void launch(const TrainCliOptions& o, int gpus) {
  run::LaunchRequest r;
  r.world = gpus;
  r.argv = {std::filesystem::read_symlink("/proc/self/exe").string(), "train", "--config", o.config, "--dir", o.dir,
            "--gpus", std::to_string(gpus)};
  if (o.resume) r.argv.push_back("--resume");
  if (o.quiet) r.argv.push_back("--quiet");
  if (!o.device.empty()) r.argv.insert(r.argv.end(), {"--device", o.device});
  if (o.stop_after > 0) r.argv.insert(r.argv.end(), {"--stop-after", std::to_string(o.stop_after)});
  const run::LaunchOutcome out = run::launch_ranks(r);
  if (!out.message.empty()) std::fprintf(stderr, "fp4lab: %s\n", out.message.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  if (out.signaled) {
    ::signal(out.code, SIG_DFL);
    ::raise(out.code);
    std::_Exit(128 + out.code);
  }
  std::exit(out.code);
}

void run_train(const TrainCliOptions& o) {
  if (o.print_config) {
    run::RunConfig c = run::load_config(o.config);
    run::pick_device(c, o.device);  // as the run would: the printed config names it
    if (o.gpus > 0) run::set_gpus(c, o.gpus, "--gpus");
    std::cout << run::config_to_json(c).dump(2) << "\n";
    std::cerr << "config hash " << run::config_hash(c) << "\n";
    return;
  }
  if (o.dir.empty()) throw UserError("train: --dir is required (the run directory)");
  run::TrainOptions t;
  t.config = o.config;
  t.dir = o.dir;
  t.resume = o.resume;
  t.stop_after = o.stop_after;
  t.device = o.device;
  t.gpus = o.gpus;
  t.echo = !o.quiet;
  t.rank = run::rank_from_environment();
  if (t.rank && !t.rank->writer()) t.echo = false;  // rank 0 speaks for the run
  if (!t.rank) {
    const run::RunConfig planned = run::planned_config(t);  // every input check, before any process starts
    if (planned.gpus > 1) launch(o, planned.gpus);
  }
  int code = 0;
  try {
    code = run::exit_code(run::train(t));
  } catch (const DirectoryInUse& e) {
    std::fprintf(stderr, "fp4lab: busy: %s\n", e.what());
    code = run::kExitRunDirInUse;
  }
  if (code != 0) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::exit(code);
  }
}

}  // namespace

void register_train_commands(CLI::App& app) {
  auto o = std::make_shared<TrainCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train one model as its JSON config says, writing only into --dir (docs/train.md).\n"
      "Exit codes: 0 succeeded, 3 diverged, 1 failed, 2 bad input, 75 the directory is in use by\n"
      "another process, 128+signal when stopped by SIGTERM/SIGINT (a checkpoint is written;\n"
      "--resume continues).");
  cmd->add_option("--config", o->config, "The run's JSON config")->required();
  CLI::Option* dir = cmd->add_option("--dir", o->dir, "The run directory (created if missing)");
  CLI::Option* resume = cmd->add_flag("--resume", o->resume,
                "Continue the run in --dir from its newest valid checkpoint (from scratch if it has none)");
  cmd->add_option("--device", o->device,
                  "cpu or cuda: overrides the config's device (it is part of the config, so of its hash: "
                  "resume with the same --device). Without it, and without a device in the config: cuda "
                  "when this build has CUDA and a GPU is visible, else cpu");
  cmd->add_option("--gpus", o->gpus,
                  "Train on N GPUs of this host (data parallelism, one process per GPU; overrides the config's "
                  "gpus, which is part of its hash when not 1: resume with the same --gpus). RANK, WORLD_SIZE and "
                  "LOCAL_RANK in the environment make this process one rank (torchrun); without them fp4lab starts "
                  "the N ranks itself (docs/train.md, \"Several GPUs\")")
      ->check(whole_number(1));
  cmd->add_flag("--quiet", o->quiet, "Write progress to train.log only, not to stderr");
  CLI::Option* print = cmd->add_flag("--print-config", o->print_config,
                                     "Print the fully resolved config (every default written out) and its hash, "
                                     "and exit (trains nothing, so it takes no --dir, --resume or --stop-after)");
  CLI::Option* stop = cmd->add_option("--stop-after", o->stop_after,
                                      "Act as if SIGTERM arrived during step N: checkpoint, exit 143 (for testing "
                                      "resumption)")
                          ->check(whole_number(1));
  // --print-config trains nothing: options about a run would be silently ignored, so they are refused.
  print->excludes(dir)->excludes(resume)->excludes(stop);
  cmd->callback([o] { run_train(*o); });
}

}  // namespace fp4::cli
