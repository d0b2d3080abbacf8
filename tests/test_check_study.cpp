// test_check_study.cpp — scripts/check-study.sh, the check that a committed study reproduces its
// published fits and report data from its committed store (issue 17, "Checks"). On a copy of
// results/markov-ground-truth (store, fits.txt) with a report written beside it: the faithful copy
// passes; one printed digit changed in fits.txt or in a report CSV fails, naming the file; a fit id
// alone does not count; a directory without a committed store or fit output is skipped (77) with
// its reason. The real committed studies are checked by their own ctest entries
// (tests/CMakeLists.txt: "committed study results/...").
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "tests/test_support.h"

namespace fs = std::filesystem;
using fp4::test::run_fp4lab;
using fp4::test::ScratchDir;

namespace {

struct ScriptRun {
  int exit_code = -1;
  std::string out, err;
};

ScriptRun check_study(const fs::path& dir, const fs::path& scratch) {
  const fs::path out = scratch / "check-stdout.txt", err = scratch / "check-stderr.txt";
  const std::string cmd = "bash '" + (fs::path(FP4LAB_SOURCE_DIR) / "scripts/check-study.sh").string() + "' '" +
                          dir.string() + "' '" + FP4LAB_BINARY + "' >'" + out.string() + "' 2>'" + err.string() +
                          "' </dev/null";
  const int status = std::system(cmd.c_str());
  ScriptRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = fp4::test::slurp(out);
  r.err = fp4::test::slurp(err);
  return r;
}

// `text` with the last digit of the first number after `marker` changed.
std::string change_digit_after(const std::string& text, const std::string& marker) {
  const size_t found = text.find(marker);
  REQUIRE(found != std::string::npos);
  size_t at = text.find_first_of("0123456789", found + marker.size());
  REQUIRE(at != std::string::npos);
  while (at + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[at + 1]))) ++at;
  std::string out = text;
  out[at] = out[at] == '9' ? '8' : static_cast<char>(out[at] + 1);
  return out;
}

}  // namespace

TEST_CASE("check-study: a committed study's fits and report CSVs are reproduced from its store, digit for digit",
          "[fit][check_study]") {
  ScratchDir dir;
  const fs::path source = fs::path(FP4LAB_SOURCE_DIR) / "results/markov-ground-truth";
  const fs::path study = dir / "markov-ground-truth";
  fs::create_directories(study);
  for (const char* f : {"study.toml", "markov-ground-truth.db.xz", "fits.txt"}) fs::copy_file(source / f, study / f);

  // The committed store and fit output as they are: reproduced.
  auto r = check_study(study, dir.path());
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("fits.txt reproduced (1 fits)") != std::string::npos);

  // A report written from the same store (as `fp4lab fit` then `fp4lab report` would publish it).
  const fs::path gen = dir / "gen";
  fs::create_directories(gen);
  fs::copy_file(source / "study.toml", gen / "study.toml");
  REQUIRE(std::system(("xz -dc '" + (source / "markov-ground-truth.db.xz").string() + "' > '" +
                       (gen / "markov-ground-truth.db").string() + "'")
                          .c_str()) == 0);
  REQUIRE(run_fp4lab("fit '" + (gen / "study.toml").string() + "' --refit", dir).exit_code == 0);
  const auto report = run_fp4lab("report '" + (gen / "study.toml").string() + "'", dir);
  INFO(report.err);
  REQUIRE(report.exit_code == 0);
  const fs::path committed_report = study / "markov-ground-truth-report";
  fs::create_directories(committed_report);
  int csvs = 0;
  for (const auto& e : fs::directory_iterator(gen / "markov-ground-truth-report"))
    if (e.path().extension() == ".csv") {
      fs::copy_file(e.path(), committed_report / e.path().filename());
      ++csvs;
    }
  REQUIRE(csvs >= 5);
  r = check_study(study, dir.path());
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("markov-ground-truth-report: " + std::to_string(csvs) + " CSV file(s) compared") !=
        std::string::npos);

  // The fit ids differ by design: a committed fits.csv with other ids still matches.
  const std::string fits_csv = fp4::test::slurp(committed_report / "fits.csv");
  REQUIRE(fits_csv.rfind("fit_id,", 0) == 0);
  std::istringstream lines(fits_csv);
  std::string line, renumbered;
  std::getline(lines, line);
  renumbered = line + "\n";
  while (std::getline(lines, line)) renumbered += "97" + line.substr(line.find(',')) + "\n";
  REQUIRE(renumbered != fits_csv);
  fp4::test::spit(committed_report / "fits.csv", renumbered);
  CHECK(check_study(study, dir.path()).exit_code == 0);

  // One printed digit of a report CSV: a mismatch naming the file.
  fp4::test::spit(committed_report / "fits.csv", change_digit_after(fits_csv, ",chinchilla,bf16,E,,"));
  r = check_study(study, dir.path());
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("markov-ground-truth-report/fits.csv differs") != std::string::npos);
  fp4::test::spit(committed_report / "fits.csv", fits_csv);

  // One printed digit of the fitted E in fits.txt: a mismatch, with the diff.
  const std::string fits_txt = fp4::test::slurp(study / "fits.txt");
  fp4::test::spit(study / "fits.txt", change_digit_after(fits_txt, "\n  E "));
  r = check_study(study, dir.path());
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("the fits differ from fits.txt") != std::string::npos);
  CHECK(r.err.find("\n-  E ") != std::string::npos);
  CHECK(r.err.find("\n+  E ") != std::string::npos);
  fp4::test::spit(study / "fits.txt", fits_txt);
  CHECK(check_study(study, dir.path()).exit_code == 0);

  // Not published yet: skipped, with the reason.
  fs::remove(study / "fits.txt");
  r = check_study(study, dir.path());
  CHECK(r.exit_code == 77);
  CHECK(r.out.find("skipped: no committed fit output (fits.txt) yet") != std::string::npos);
  fs::remove(study / "markov-ground-truth.db.xz");
  r = check_study(study, dir.path());
  CHECK(r.exit_code == 77);
  CHECK(r.out.find("skipped: no committed store (*.db.xz) yet") != std::string::npos);
}
