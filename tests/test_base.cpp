// test_base.cpp — base/: number parsing, strict JSON, progress formatting, the clock's timestamp,
// the directory lock and the stop-signal scope.
#include <catch2/catch.hpp>

#include <signal.h>

#include <cstdint>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/directory_lock.h"
#include "base/format.h"
#include "base/parse_number.h"
#include "base/stop_signals.h"
#include "base/strict_json.h"
#include "base/user_error.h"
#include "tests/test_support.h"

TEST_CASE("parse_integer reads whole decimal strings that fit, and nothing else", "[base]") {
  CHECK(fp4::parse_integer<int>("42") == 42);
  CHECK(fp4::parse_integer<int>("-7") == -7);
  CHECK(fp4::parse_integer<int64_t>("99999999999") == int64_t{99999999999});
  CHECK_FALSE(fp4::parse_integer<int>("99999999999"));  // beyond int: empty, not std::out_of_range
  CHECK_FALSE(fp4::parse_integer<unsigned>("-1"));
  for (const char* bad : {"", " 1", "1 ", "+1", "1x", "0x10", "1e3", "１"}) CHECK_FALSE(fp4::parse_integer<int>(bad));
}

TEST_CASE("strict JSON: the document as nlohmann reads it, without repeated keys or overflowing numbers", "[base]") {
  const std::string text = R"({"a": [1, -2, 3.5, "x", true, null, {"b": {}}], "c": {"d": 18446744073709551615}})";
  CHECK(fp4::parse_json_strictly(text, "f.json") == nlohmann::json::parse(text));
  CHECK(fp4::parse_json_strictly("7", "f.json") == 7);
  const auto error_of = [](const std::string& t) -> std::string {
    try {
      fp4::parse_json_strictly(t, "f.json");
    } catch (const fp4::UserError& e) {
      return e.what();
    }
    return "(no error)";
  };
  CHECK(error_of("{\"a\": [{\"k\": 1}, {\"k\": 2, \"k\": 3}]}") ==
        "f.json:1:27: a[1].k: is given twice (first at line 1, column 19); keep one");
  CHECK(error_of("{\"a\": {\"b\": [1, 2, 1e999]}}") ==
        "f.json:1:20: a.b[2]: number overflow parsing '1e999': the number is out of range");
  CHECK(error_of("{\"a\": 1,\n \"b\": }").rfind("f.json:2:7: malformed JSON: syntax error", 0) == 0);
  CHECK(error_of("").rfind("f.json:1:1: malformed JSON:", 0) == 0);
}

TEST_CASE("progress formatting: durations and rates", "[base]") {
  CHECK(fp4::format_duration(0) == "0s");
  CHECK(fp4::format_duration(59.4) == "59s");
  CHECK(fp4::format_duration(187) == "3m07s");
  CHECK(fp4::format_duration(7500) == "2h05m");
  CHECK(fp4::format_duration(-1) == "?");
  CHECK(fp4::format_duration(1e9) == "?");
  CHECK(fp4::format_rate(950) == "950");
  CHECK(fp4::format_rate(12345) == "12.3k");
  CHECK(fp4::format_rate(1.25e6) == "1.25M");
  CHECK(std::regex_match(fp4::utc_timestamp(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
}

TEST_CASE("the directory lock is exclusive while held and free once released", "[base]") {
  fp4::test::ScratchDir dir;
  {
    const fp4::DirectoryLock held(dir.path());
    // flock locks belong to an open file description: a second one conflicts even in one process.
    CHECK_THROWS_AS(fp4::DirectoryLock(dir.path()), fp4::DirectoryInUse);
  }
  CHECK_NOTHROW(fp4::DirectoryLock(dir.path()));
  CHECK_THROWS_AS(fp4::DirectoryLock(dir / "missing"), std::runtime_error);
}

TEST_CASE("stop signals are recorded, a second one kills or is counted, as the owner chose", "[base]") {
  const auto handler_of = [](int signo) {
    struct sigaction now = {};
    sigaction(signo, nullptr, &now);
    return now.sa_handler;
  };
  const auto int_before = handler_of(SIGINT), term_before = handler_of(SIGTERM);
  {
    const fp4::StopSignals signals(fp4::StopSignals::Second::counted);
    CHECK(fp4::StopSignals::first() == 0);
    ::raise(SIGTERM);
    ::raise(SIGINT);
    CHECK(fp4::StopSignals::first() == SIGTERM);
    CHECK(fp4::StopSignals::count() == 2);
    CHECK(handler_of(SIGTERM) != SIG_DFL);  // still ours: a third would be counted too
  }
  {
    const fp4::StopSignals signals(fp4::StopSignals::Second::kills);
    CHECK(fp4::StopSignals::count() == 0);  // a new scope starts from nothing
    ::raise(SIGINT);
    CHECK(fp4::StopSignals::first() == SIGINT);
    CHECK(handler_of(SIGINT) == SIG_DFL);  // the next SIGINT ends the process
    CHECK(handler_of(SIGTERM) != SIG_DFL);
  }
  CHECK(handler_of(SIGINT) == int_before);  // the handlers from before the scopes are back
  CHECK(handler_of(SIGTERM) == term_before);
  CHECK(std::string(fp4::stop_signal_name(SIGTERM)) == "SIGTERM");
}
