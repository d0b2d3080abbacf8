// test_fit_markov.cpp — ground truth for E (issue 12, "Validation"): results/markov-ground-truth/
// study.toml trained for real (12 tiny CPU runs), fitted with chinchilla by `fp4lab fit`, and the
// fitted E's 95% interval printed beside the source's true entropy rate from `fp4lab data entropy`.
// No model can beat the entropy rate, so the test fails if the whole interval lies below it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

using fp4::test::run_fp4lab;
using fp4::test::ScratchDir;

TEST_CASE("fit markov: the fitted E's interval does not lie below the source's entropy rate", "[fit][fit_markov]") {
  ScratchDir dir;
  const std::filesystem::path toml = dir / "study.toml";
  std::filesystem::copy_file(std::filesystem::path(FP4LAB_SOURCE_DIR) / "results/markov-ground-truth/study.toml", toml);

  const auto entropy = run_fp4lab("data entropy 'synthetic:markov?order=1&vocab=16&branch=4&seed=1'", dir);
  REQUIRE(entropy.exit_code == 0);
  std::istringstream lines(entropy.out);
  std::string line;
  double rate = 0;
  while (std::getline(lines, line))
    if (line.rfind("entropy rate", 0) == 0) rate = std::stod(line.substr(std::string("entropy rate").size()));
  REQUIRE(rate > 1.0);

  const auto sweep = run_fp4lab("sweep run '" + toml.string() + "' --plain", dir);
  INFO(sweep.err << sweep.out);
  REQUIRE(sweep.exit_code == 0);
  const auto fit = run_fp4lab("fit '" + toml.string() + "' --format json", dir);
  INFO(fit.err);
  REQUIRE(fit.exit_code == 0);
  const nlohmann::json fits = nlohmann::json::parse(fit.out)["fits"];
  REQUIRE(fits.size() == 1);
  CHECK(fits[0]["n_points"] == 12);
  const double e = fits[0]["params"]["E"].get<double>();
  const nlohmann::json ci = fits[0]["intervals"]["params"]["E"];
  REQUIRE(ci[0].is_number());
  REQUIRE(ci[1].is_number());
  const double lo = ci[0].get<double>(), hi = ci[1].get<double>();
  WARN("markov ground truth: fitted E = " << e << ", 95% [" << lo << ", " << hi << "]; true entropy rate " << rate
                                          << " nats/token");
  CHECK(hi >= rate);  // the whole interval below the entropy rate would be a wrong fit
  CHECK(lo <= hi);
}
