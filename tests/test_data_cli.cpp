// `fp4lab data ...` end to end through the binary: output, exit codes, one-line errors.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"

using namespace fp4::test;

TEST_CASE("fp4lab data entropy prints the entropies of a synthetic source", "[data][cli]") {
  ScratchDir tmp;
  CliRun r = run_fp4lab("data entropy 'synthetic:markov?order=2&vocab=64&branch=8&alpha=1.1&seed=0' --seq-len 256", tmp);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("synthetic:markov?order=2&vocab=64&branch=8&alpha=1.1&seed=0"));
  CHECK_THAT(r.out, Catch::Matches("(.|\\n)*entropy rate +[0-9]+\\.[0-9]{9} nats/token +[0-9]+\\.[0-9]{9} bits/token(.|\\n)*"));
  CHECK_THAT(r.out, Catch::Matches("(.|\\n)*unigram entropy +[0-9]+\\.[0-9]{9} nats/token(.|\\n)*"));
  CHECK_THAT(r.out, Catch::Contains("floor at T=256"));

  CliRun j = run_fp4lab("data entropy 'synthetic:markov?seed=0' --json", tmp);
  REQUIRE(j.exit_code == 0);
  auto parsed = nlohmann::json::parse(j.out);
  CHECK(parsed.at("entropy_rate_nats").get<double>() < parsed.at("unigram_entropy_nats").get<double>());
}

TEST_CASE("fp4lab data refuses bad sources and inputs with exit code 2 and one line", "[data][cli]") {
  ScratchDir tmp;
  for (const char* args : {"data entropy 'synthetic:markov?order=99'", "data entropy 'synthetic:nope'",
                           "data info 'synthetic:markov?vocab=1'", "data info /nonexistent/shards",
                           "data build --tokenizer bpe x.txt --out o", "data build --tokenizer bytes /nonexistent.txt --out o"}) {
    CliRun r = run_fp4lab(args, tmp);
    INFO(args << "\n" << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::StartsWith("fp4lab: error: "));
    CHECK(r.err.find('\n') == r.err.size() - 1);
  }
}

TEST_CASE("fp4lab data build writes shards that data info verifies", "[data][cli]") {
  ScratchDir tmp;
  std::string text;
  for (int n = 1; n <= 210; ++n) text += (n > 1 ? "\n<|endoftext|>\n" : "") + std::string("doc ") + std::to_string(n) + "\n";
  spit(tmp / "t.txt", text);
  const std::string out = (tmp / "shards").string();
  CliRun r = run_fp4lab("data build --tokenizer bytes '" + (tmp / "t.txt").string() + "' --out '" + out + "'", tmp);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("validation  " + std::to_string(2 * (8 + 15) + 0) + " tokens"));
  CHECK_THAT(r.err, Catch::Contains("t.txt") && Catch::Contains("done"));

  CliRun again = run_fp4lab("data build --tokenizer bytes '" + (tmp / "t.txt").string() + "' --out '" + out + "'", tmp);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.out, Catch::Contains("up to date"));

  CliRun info = run_fp4lab("data info '" + out + "' --verify", tmp);
  INFO(info.err);
  CHECK(info.exit_code == 0);
  CHECK_THAT(info.out, Catch::Contains("vocabulary   256") && Catch::Contains("verified"));

  CliRun entropy = run_fp4lab("data entropy '" + out + "'", tmp);
  CHECK(entropy.exit_code == 0);
  CHECK_THAT(entropy.out, Catch::Contains("unknown") && Catch::Contains("empirical"));
}
