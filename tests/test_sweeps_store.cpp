// test_sweeps_store.cpp — the sweep store (store/store.h): opening, pragmas and migrations, grids
// and runs, leases, attempts, parsing and ingesting metrics.jsonl, the views on a hand-built study,
// the documented example queries, and many writers at once. Grid points are built by hand here so
// that these tests do not depend on the TOML parser.
#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "store/schema.h"
#include "store/store.h"
#include "sweeps/metrics_jsonl.h"
#include "tests/sql_test_helpers.h"
#include "tests/test_support.h"

using fp4::store::AttemptEnd;
using fp4::store::GridPointRecord;
using fp4::store::GridRecord;
using fp4::store::MetricRow;
using fp4::store::MetricsBatch;
using fp4::sweeps::parse_metrics_jsonl;
using fp4::store::parse_run_state;
using fp4::store::Provenance;
using fp4::store::RunRecord;
using fp4::store::RunState;
using fp4::store::Store;
using fp4::test::exec_sql;
using fp4::test::query_int;
using fp4::test::query_one;
using fp4::test::ScratchDir;
using fp4::test::write_old_store;
using nlohmann::json;

namespace {

// A grid point as the spec module would make it; ids are readable stand-ins for SHA-256 digests.
GridPointRecord point(const std::string& name, const std::string& recipe, const std::string& match_key,
                      uint64_t seed = 0) {
  GridPointRecord p;
  p.id = "id-" + name;
  p.name = name;
  p.config_json = json{{"recipe", recipe}, {"train", {{"seed", seed}}}, {"match", match_key}}.dump();
  p.match_key = match_key;
  p.axes = {{"recipe", recipe}, {"seed", std::to_string(seed)}};
  p.recipe = recipe;
  p.baseline = recipe == "bf16";
  p.model = "d2";
  p.n_params = 1000;
  p.n_params_nonembedding = 600;
  p.n_params_active_nonembedding = 600;
  p.tokens = 50000;
  p.seed = seed;
  p.flops_per_token = 3600.5;
  return p;
}

GridRecord spec_of(const std::string& text, const std::filesystem::path& dir, std::vector<GridPointRecord> points) {
  GridRecord s;
  s.file = dir / "grid.toml";
  s.base_dir = dir;
  s.text = text;
  s.text_hash = "hash-of-" + text;
  s.name = "study";
  s.run_root = dir / "runs";
  s.axis_names = {"recipe", "seed"};
  s.points = std::move(points);
  return s;
}

// The message of the fp4::UserError `f` throws; checks it is one line naming `path`.
template <typename F>
std::string user_error(F&& f, const std::filesystem::path& path) {
  try {
    f();
  } catch (const fp4::UserError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find(path.string()) != std::string::npos);
    return what;
  }
  FAIL("no fp4::UserError");
  return {};
}

MetricsBatch batch_of(const std::string& text) { return parse_metrics_jsonl(text, "metrics.jsonl"); }

std::string train_row(int64_t step, const std::string& loss) {
  return R"({"kind":"train","step":)" + std::to_string(step) + R"(,"tokens":)" + std::to_string(step * 100) +
         R"(,"loss":)" + loss + R"(,"lr":0.001,"grad_norm":0.5})" + "\n";
}

std::string eval_row(int64_t step, const std::string& loss) {
  return R"({"kind":"eval","step":)" + std::to_string(step) + R"(,"tokens":)" + std::to_string(step * 100) +
         R"(,"loss":)" + loss + R"(,"eval_tokens":4096})" + "\n";
}

uint64_t bits_of(double v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

Provenance provenance_of(const std::string& host) {
  Provenance p;
  p.host = host;
  p.devices = "cuda:1";
  p.gpu_name = "NVIDIA H200";
  p.gpu_driver = "570.86";
  p.cuda_version = "12.8";
  p.git_commit = "0123456789abcdef0123456789abcdef01234567";
  p.git_dirty = true;
  p.fp4lab_version = "0.1.0";
  p.libraries = json{{"sqlite", sqlite3_libversion()}, {"fmt", "9.1.0"}};
  return p;
}

// The "## The store" section of docs/sweeps.md.
std::string store_doc_section() {
  const std::string text = fp4::test::slurp(std::filesystem::path(FP4LAB_SOURCE_DIR) / "docs/sweeps.md");
  const size_t start = text.find("## The store");
  if (start == std::string::npos) return {};
  const size_t end = text.find("\n## ", start + 1);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// A study with known final losses: bf16, ufp4 and nvfp4 (diverged: a null final loss) at one
// matched point m0, and at another point m1 an e2m1 run whose bf16 baseline has no loss yet.
struct ViewStudy {
  ScratchDir dir;
  std::unique_ptr<Store> store;
  ViewStudy() {
    store = Store::open(dir / "study.db", Store::Mode::read_write);
    store->record_grid(spec_of("views", dir.path(),
                               {point("bf16-s0", "bf16", "m0", 0), point("ufp4-s0", "ufp4", "m0", 0),
                                point("e2m1-s1", "e2m1", "m1", 1), point("bf16-s1", "bf16", "m1", 1),
                                point("nvfp4-s0", "nvfp4", "m0", 0)}));
    // Final eval/loss at step 200 for each; the earlier evals must not count.
    store->ingest("id-bf16-s0", batch_of(eval_row(0, "5.5") + eval_row(100, "3.4") + eval_row(200, "3.0")), 0);
    store->ingest("id-ufp4-s0",
                  batch_of(eval_row(0, "5.5") + eval_row(200, "3.15") + eval_row(100, "3.6") + train_row(200, "3.1")),
                  0);
    store->ingest("id-nvfp4-s0", batch_of(eval_row(100, "3.7") + eval_row(200, "null")), 0);
    store->ingest("id-e2m1-s1", batch_of(eval_row(200, "3.3")), 0);
    store->set_state("id-bf16-s0", RunState::succeeded, "");
    store->set_state("id-ufp4-s0", RunState::succeeded, "");
    store->set_state("id-nvfp4-s0", RunState::diverged, "non-finite validation loss");
  }
};

// Runs `body` in a child process and returns its pid; the child exits 0 when body returns, 1 with
// the message in `error_file` when it throws. _exit keeps the child out of Catch2's teardown.
pid_t spawn(const std::function<void()>& body, const std::filesystem::path& error_file) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  int code = 0;
  try {
    body();
  } catch (const std::exception& e) {
    fp4::test::spit(error_file, e.what());
    code = 1;
  }
  _exit(code);
}

}  // namespace

TEST_CASE("sweeps store: run states have names and parse back", "[sweeps][sweeps_store]") {
  for (RunState s : {RunState::pending, RunState::running, RunState::succeeded, RunState::failed, RunState::diverged,
                     RunState::orphaned})
    CHECK(parse_run_state(fp4::store::run_state_name(s)) == s);
  CHECK_THROWS_AS(parse_run_state("done"), fp4::UserError);
}

TEST_CASE("sweeps store: a new store is created in WAL mode with a busy timeout, and reopens", "[sweeps][sweeps_store]") {
  ScratchDir dir;
  const auto path = dir / "study.db";
  {
    auto store = Store::open(path, Store::Mode::read_write);
    CHECK(std::filesystem::exists(path));
    CHECK(store->path() == path);
    CHECK(store->schema_version() == Store::latest_schema_version());
    CHECK(Store::latest_schema_version() >= 2);
    CHECK(query_one(store->handle(), "PRAGMA journal_mode") == "wal");
    CHECK(query_int(store->handle(), "PRAGMA busy_timeout") == 30000);
    CHECK(query_int(store->handle(), "PRAGMA foreign_keys") == 1);
    CHECK(query_int(store->handle(), "PRAGMA synchronous") == 2);  // FULL
    CHECK(query_int(store->handle(), "PRAGMA application_id") == fp4::store::detail::kStoreApplicationId);
    store->record_grid(spec_of("a", dir.path(), {point("p0", "bf16", "m0")}));
  }
  {
    auto store = Store::open(path, Store::Mode::read_write);
    CHECK(store->schema_version() == Store::latest_schema_version());
    CHECK(store->runs().size() == 1);
  }
  auto reader = Store::open(path, Store::Mode::read_only);
  CHECK(query_int(reader->handle(), "PRAGMA busy_timeout") == 30000);
  CHECK(query_one(reader->handle(), "PRAGMA journal_mode") == "wal");
  REQUIRE(reader->runs().size() == 1);
  CHECK(reader->runs()[0].name == "p0");
  CHECK_THROWS_AS(reader->set_state("id-p0", RunState::failed, "x"), std::runtime_error);
}

TEST_CASE("sweeps store: recording a grid twice changes nothing, and a second grid links shared runs",
          "[sweeps][sweeps_store]") {
  ScratchDir dir;
  auto store = Store::open(dir / "study.db", Store::Mode::read_write);
  const GridRecord first = spec_of("grid one", dir.path(),
                                  {point("a", "bf16", "m0"), point("b", "ufp4", "m0"), point("c", "e2m1", "m0")});
  const int64_t id1 = store->record_grid(first);
  CHECK(store->record_grid(first) == id1);
  REQUIRE(store->runs().size() == 3);
  CHECK(query_int(store->handle(), "SELECT count(*) FROM grids") == 1);
  CHECK(query_int(store->handle(), "SELECT count(*) FROM grid_runs") == 3);

  const RunRecord b = *store->run("id-b");
  CHECK(b.name == "b");
  CHECK(b.config_json == first.points[1].config_json);
  CHECK(b.match_key == "m0");
  CHECK(b.recipe == "ufp4");
  CHECK_FALSE(b.baseline);
  CHECK(store->run("id-a")->baseline);
  CHECK(b.model == "d2");
  CHECK(b.n_params == 1000);
  CHECK(b.n_params_nonembedding == 600);
  CHECK(b.tokens == 50000);
  CHECK(b.flops_per_token == 3600.5);
  CHECK(b.state == RunState::pending);
  CHECK(b.attempts == 0);
  CHECK(b.dir == (dir.path() / "runs" / "id-b").string());
  CHECK(b.error.empty());
  CHECK(b.lease_owner.empty());
  CHECK(b.ingested_bytes == 0);
  CHECK_FALSE(store->run("no-such-run").has_value());

  // The second grid shares run b (under another name and axes) and adds d; b keeps its state.
  store->set_state("id-b", RunState::succeeded, "");
  GridPointRecord shared = point("b-renamed", "ufp4", "m0");
  shared.id = "id-b";
  shared.axes = {{"recipe", "ufp4"}, {"lr", "0.001"}};
  const GridRecord second = spec_of("grid two", dir.path(), {point("d", "nvfp4", "m0"), shared});
  const int64_t id2 = store->record_grid(second);
  CHECK(id2 != id1);
  CHECK(store->runs().size() == 4);
  CHECK(store->run("id-b")->state == RunState::succeeded);
  CHECK(store->run("id-b")->name == "b");
  CHECK(query_int(store->handle(), "SELECT count(*) FROM grid_runs WHERE run = 'id-b'") == 2);
  CHECK(query_one(store->handle(), "SELECT axes_json FROM grid_runs WHERE run = 'id-b' AND grid = " +
                                       std::to_string(id2)) == R"({"lr":"0.001","recipe":"ufp4"})");
  CHECK(query_one(store->handle(), "SELECT name FROM grid_runs WHERE run = 'id-b' AND grid = " +
                                       std::to_string(id2)) == "b-renamed");

  std::vector<std::string> names;
  for (const RunRecord& r : store->runs_of_grid(second.text_hash)) names.push_back(r.name);
  CHECK(names == std::vector<std::string>{"d", "b"});  // grid order
  names.clear();
  for (const RunRecord& r : store->runs()) names.push_back(r.name);
  CHECK(names == std::vector<std::string>{"a", "b", "c", "d"});  // by name
  CHECK(store->runs_of_grid("unknown").empty());
  CHECK(query_one(store->handle(), "SELECT text FROM grids WHERE id = " + std::to_string(id1)) == "grid one");
  CHECK(query_one(store->handle(), "SELECT axis_names FROM grids WHERE id = " + std::to_string(id1)) ==
        R"(["recipe","seed"])");
}

TEST_CASE("sweeps store: 64-bit seeds round trip", "[sweeps][sweeps_store]") {
  ScratchDir dir;
  auto store = Store::open(dir / "study.db", Store::Mode::read_write);
  const uint64_t big = std::numeric_limits<uint64_t>::max() - 4;
  store->record_grid(spec_of("seeds", dir.path(), {point("small", "bf16", "m0", 7), point("big", "bf16", "m1", big)}));
  CHECK(store->run("id-small")->seed == 7);
  CHECK(store->run("id-big")->seed == big);
  CHECK(query_int(store->handle(), "SELECT seed FROM runs WHERE id = 'id-small'") == 7);
  CHECK(query_int(store->handle(), "SELECT seed FROM runs WHERE id = 'id-big'") == -5);  // the bits, as documented
}

TEST_CASE("sweeps store: parse_metrics_jsonl reads complete lines only", "[sweeps][sweeps_store]") {
  const std::string complete =
      R"({"kind":"run","step":0,"tokens":0,"event":"start","n_params":1234,"n_params_nonembedding":234,"flops_per_token":1500.5,"tokens_total":6400,"version":"0.1.0"})"
      "\n" +
      eval_row(0, "5.25") + train_row(1, "5.0") +
      R"({"kind":"probe","step":1,"tokens":100,"layer":0,"linear":"qkv","slot":"fprop_x","gemm":"fprop","alpha":0.98,"nmse":0.01,"sqnr_db":20.5,"shrink":null,"b_eff":0.9,"count":4096,"nonfinite":0})"
      "\n"
      R"({"kind":"probe_gemm","step":1,"tokens":100,"layer":0,"linear":"qkv","gemm":"fprop","alpha_a":0.98,"alpha_b":0.99,"eta":0.9702})"
      "\n"
      R"({"kind":"future_kind","step":1,"tokens":100,"whatever":[1,2]})"
      "\n"
      "\n" +
      R"({"kind":"run","step":1,"tokens":100,"event":"resume","n_params":1234})"
      "\n" +
      train_row(2, "null");
  const std::string partial = R"({"kind":"train","step":3,"tok)";

  SECTION("complete lines") {
    const MetricsBatch b = parse_metrics_jsonl(complete, "runs/x/metrics.jsonl");
    CHECK(b.consumed_bytes == static_cast<int64_t>(complete.size()));
    // eval: loss, eval_tokens; train: loss, lr, grad_norm (twice).
    REQUIRE(b.metrics.size() == 8);
    // Within a row the order of keys is JSON's business (nlohmann sorts them); rows keep file order.
    const auto at = [&](size_t i) { return b.metrics[i].key + "@" + std::to_string(b.metrics[i].step); };
    std::vector<std::string> first_two = {at(0), at(1)};
    std::sort(first_two.begin(), first_two.end());
    CHECK(first_two == std::vector<std::string>{"eval/eval_tokens@0", "eval/loss@0"});
    for (size_t i = 0; i < 2; ++i)
      CHECK(b.metrics[i].value == (b.metrics[i].key == "eval/loss" ? 5.25 : 4096.0));
    std::vector<std::string> keys;
    for (size_t i = 2; i < 5; ++i) keys.push_back(at(i));
    std::sort(keys.begin(), keys.end());
    CHECK(keys == std::vector<std::string>{"train/grad_norm@1", "train/loss@1", "train/lr@1"});
    CHECK(b.metrics[2].tokens == 100);
    const auto nan_row = std::find_if(b.metrics.begin() + 5, b.metrics.end(),
                                      [](const MetricRow& m) { return m.key == "train/loss"; });
    REQUIRE(nan_row != b.metrics.end());
    CHECK(nan_row->step == 2);
    CHECK(nan_row->is_nan);
    for (size_t i = 0; i < b.metrics.size(); ++i)
      if (&b.metrics[i] != &*nan_row) CHECK_FALSE(b.metrics[i].is_nan);

    REQUIRE(b.probes.size() == 1);
    CHECK(b.probes[0].step == 1);
    CHECK(b.probes[0].layer == 0);
    CHECK(b.probes[0].linear == "qkv");
    CHECK(b.probes[0].slot == "fprop_x");
    CHECK(b.probes[0].gemm == "fprop");
    CHECK(b.probes[0].alpha == 0.98);
    CHECK(b.probes[0].sqnr_db == 20.5);
    CHECK(std::isnan(b.probes[0].shrink));
    CHECK(b.probes[0].count == 4096);
    REQUIRE(b.probe_gemms.size() == 1);
    CHECK(b.probe_gemms[0].gemm == "fprop");
    CHECK(b.probe_gemms[0].eta == 0.9702);
    // The last "run" row wins.
    CHECK(b.run_info.at("event") == "resume");
  }
  SECTION("a cut-short last line is left for later") {
    const MetricsBatch b = parse_metrics_jsonl(complete + partial, "m");
    CHECK(b.consumed_bytes == static_cast<int64_t>(complete.size()));
    CHECK(b.metrics.size() == 8);
    const MetricsBatch only_partial = parse_metrics_jsonl(partial, "m");
    CHECK(only_partial.consumed_bytes == 0);
    CHECK(only_partial.metrics.empty());
    CHECK(only_partial.run_info.is_null());
    CHECK(parse_metrics_jsonl("", "m").consumed_bytes == 0);
  }
  SECTION("a malformed complete line names the source and the line") {
    const auto error_of = [](const std::string& text) -> std::string {
      try {
        parse_metrics_jsonl(text, "runs/x/metrics.jsonl");
      } catch (const std::runtime_error& e) {
        return e.what();
      }
      return "<no error>";
    };
    const std::string bad_json = error_of(train_row(1, "1") + train_row(2, "2") + "{\"kind\":\"train\",\n");
    CHECK(bad_json.rfind("runs/x/metrics.jsonl:3: malformed metrics row: ", 0) == 0);
    CHECK(bad_json.find('\n') == std::string::npos);
    CHECK(error_of(R"({"kind":"train","tokens":1,"loss":2})" "\n") ==
          "runs/x/metrics.jsonl:1: malformed metrics row: missing \"step\"");
    CHECK(error_of(R"({"kind":"eval","step":"3","tokens":1})" "\n").find("\"step\" must be an integer") !=
          std::string::npos);
    CHECK(error_of("[1,2]\n").find("not a JSON object") != std::string::npos);
    CHECK(error_of(R"({"step":1})" "\n").find("missing \"kind\"") != std::string::npos);
    CHECK(error_of(R"({"kind":"probe","step":1,"tokens":1,"layer":0,"linear":"qkv","slot":"fprop_x","gemm":"fprop","alpha":"x"})"
                   "\n")
              .find("\"alpha\" must be a number or null") != std::string::npos);
    // A malformed line that is not complete yet is not an error: it may still be being written.
    CHECK(error_of("{\"kind\":") == "<no error>");
  }
}

TEST_CASE("sweeps store: ingest upserts, keeps NaN as is_nan, and round-trips doubles exactly",
          "[sweeps][sweeps_store]") {
  ScratchDir dir;
  auto store = Store::open(dir / "study.db", Store::Mode::read_write);
  store->record_grid(spec_of("g", dir.path(), {point("r", "ufp4", "m0")}));
  sqlite3* db = store->handle();

  SECTION("a step done again replaces the old value, also within one batch") {
    store->ingest("id-r", batch_of(train_row(1, "2.0") + train_row(2, "1.9")), 10);
    store->ingest("id-r", batch_of(train_row(2, "1.8") + train_row(3, "1.7") + train_row(3, "1.75")), 20);
    const std::vector<MetricRow> loss = store->metrics("id-r", "train/loss");
    REQUIRE(loss.size() == 3);
    CHECK(loss[0].value == 2.0);
    CHECK(loss[1].value == 1.8);
    CHECK(loss[2].value == 1.75);
    CHECK(loss[2].step == 3);
    CHECK(loss[2].tokens == 300);
    CHECK(store->metric_count("id-r") == 9);  // loss, lr, grad_norm at steps 1..3
    CHECK(store->run("id-r")->ingested_bytes == 20);
  }
  SECTION("null is stored as is_nan with a NULL value, and replaced by a later finite value") {
    store->ingest("id-r", batch_of(train_row(1, "null") + eval_row(1, "null")), 0);
    const std::vector<MetricRow> loss = store->metrics("id-r", "train/loss");
    REQUIRE(loss.size() == 1);
    CHECK(loss[0].is_nan);
    CHECK(std::isnan(loss[0].value));
    CHECK(query_one(db, "SELECT value IS NULL AND is_nan = 1 FROM metrics WHERE key = 'train/loss'") == "1");
    REQUIRE(store->final_loss("id-r").has_value());
    CHECK(std::isnan(*store->final_loss("id-r")));
    store->ingest("id-r", batch_of(train_row(1, "4.5")), 0);
    CHECK(query_one(db, "SELECT value || ' ' || is_nan FROM metrics WHERE key = 'train/loss'") == "4.5 0");
  }
  SECTION("a loss read back is bit-identical to the value parsed from JSON") {
    std::mt19937_64 rng(12345);
    std::string text;
    std::vector<double> written;
    for (int step = 1; step <= 300; ++step) {
      double v = 0;
      do {
        const uint64_t bits = rng();
        std::memcpy(&v, &bits, sizeof v);
      } while (!std::isfinite(v));
      written.push_back(v);
      text += train_row(step, json(v).dump());
    }
    text += eval_row(300, json(written.back()).dump());
    const MetricsBatch batch = batch_of(text);
    store->ingest("id-r", batch, batch.consumed_bytes);
    const std::vector<MetricRow> loss = store->metrics("id-r", "train/loss");
    REQUIRE(loss.size() == written.size());
    for (size_t i = 0; i < written.size(); ++i) {
      INFO("step " << i + 1);
      CHECK(bits_of(loss[i].value) == bits_of(written[i]));
    }
    CHECK(bits_of(*store->final_loss("id-r")) == bits_of(written.back()));
  }
  SECTION("probes upsert per (step, layer, linear, slot) and keep non-finite values as NULL") {
    const std::string probe =
        R"({"kind":"probe","step":5,"tokens":500,"layer":1,"linear":"mlp_in","slot":"wgrad_x","gemm":"wgrad","alpha":ALPHA,"nmse":0.02,"sqnr_db":null,"shrink":-0.01,"b_eff":0.93,"count":128,"nonfinite":2})"
        "\n";
    const std::string gemm =
        R"({"kind":"probe_gemm","step":5,"tokens":500,"layer":1,"linear":"mlp_in","gemm":"wgrad","alpha_a":0.97,"alpha_b":null,"eta":null})"
        "\n";
    const auto with_alpha = [&](const std::string& alpha) {
      std::string s = probe;
      s.replace(s.find("ALPHA"), 5, alpha);
      return s;
    };
    store->ingest("id-r", batch_of(with_alpha("0.95") + gemm), 0);
    store->ingest("id-r", batch_of(with_alpha("0.96") + gemm), 0);
    CHECK(query_int(db, "SELECT count(*) FROM probes") == 1);
    CHECK(query_one(db, "SELECT alpha FROM probes") == "0.96");
    CHECK(query_one(db, "SELECT sqnr_db FROM probes") == "NULL");
    CHECK(query_one(db, "SELECT gemm || ' ' || count || ' ' || nonfinite FROM probes") == "wgrad 128 2");
    CHECK(query_int(db, "SELECT count(*) FROM probe_gemms") == 1);
    CHECK(query_one(db, "SELECT eta FROM probe_gemms") == "NULL");
    CHECK(query_one(db, "SELECT alpha_a FROM probe_gemms") == "0.97");
  }
  SECTION("ingesting unknown runs is an error") {
    CHECK_THROWS_AS(store->ingest("id-nope", batch_of(train_row(1, "1")), 0), std::runtime_error);
  }
}

namespace {

// The columns PRAGMA table_info reports for `table`: "name TYPE notnull pk" each.
std::vector<std::string> table_columns(sqlite3* db, const std::string& table) {
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &s, nullptr) == SQLITE_OK);
  std::vector<std::string> out;
  while (sqlite3_step(s) == SQLITE_ROW)
    out.push_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, 1))) + " " +
                  reinterpret_cast<const char*>(sqlite3_column_text(s, 2)) + " " +
                  std::to_string(sqlite3_column_int(s, 3)) + " " + std::to_string(sqlite3_column_int(s, 5)));
  sqlite3_finalize(s);
  return out;
}

// The same, as a probe row's field list (base/probe_rows.h) says they must be: the run, then
// every field (integers INTEGER NOT NULL, text TEXT NOT NULL, reals REAL that may be NULL), the run
// and the key fields forming the primary key in order.
template <class Row>
std::vector<std::string> columns_of_row() {
  std::vector<std::string> out{"run TEXT 1 1"};
  int key = 1;
  Row r;
  Row::for_each_field(r, [&](const char* name, bool is_key, const auto& v) {
    using V = std::decay_t<decltype(v)>;
    const std::string type = std::is_same_v<V, double> ? "REAL 0" : std::is_same_v<V, std::string> ? "TEXT 1" : "INTEGER 1";
    out.push_back(std::string(name) + " " + type + " " + std::to_string(is_key ? ++key : 0));
  });
  return out;
}

}  // namespace

TEST_CASE("sweeps store: the probe tables have exactly the probe rows' fields as columns", "[sweeps][sweeps_store]") {
  // The schema's CREATE TABLE is a migration (store/schema.cpp) and stays as written; this holds
  // it to the one list of fields the trainer writes and the ingest reads and inserts.
  ScratchDir dir;
  auto store = Store::open(dir / "study.db", Store::Mode::read_write);
  CHECK(table_columns(store->handle(), "probes") == columns_of_row<fp4::store::ProbeRow>());
  CHECK(table_columns(store->handle(), "probe_gemms") == columns_of_row<fp4::store::ProbeGemmRow>());
  // Every field a trainer's row carries comes back out of the store.
  const std::string row =
      R"({"kind":"probe","step":7,"tokens":700,"layer":2,"linear":"qkv","slot":"fprop_x","gemm":"fprop","alpha":0.5,"nmse":0.25,"sqnr_db":6.0,"shrink":-0.125,"b_eff":0.75,"count":64,"nonfinite":3})"
      "\n";
  store->record_grid(spec_of("g", dir.path(), {point("r", "ufp4", "m0")}));
  store->ingest("id-r", batch_of(row), 0);
  CHECK(query_one(store->handle(), "SELECT step || layer || linear || slot || gemm || alpha || nmse || sqnr_db || shrink || "
                                   "b_eff || count || nonfinite FROM probes") == "72qkvfprop_xfprop0.50.256.0-0.1250.75643");
}

TEST_CASE("sweeps store: ingesting a growing metrics.jsonl is idempotent and advances the offset",
          "[sweeps][sweeps_store]") {
  ScratchDir dir;
  auto store = Store::open(dir / "study.db", Store::Mode::read_write);
  store->record_grid(spec_of("g", dir.path(), {point("r", "ufp4", "m0")}));
  const std::string run_row =
      R"({"kind":"run","step":0,"tokens":0,"event":"start","n_params":4321,"n_params_nonembedding":321,"flops_per_token":2222.25,"tokens_total":51200,"data_fingerprint":"fp-of-the-data"})"
      "\n";
  CHECK(store->run("id-r")->data_fingerprint.empty());  // nothing reported yet
  std::string file = run_row + eval_row(0, "5.5") + train_row(1, "5.0") + train_row(2, "4.5") + "{\"kind\":\"tra";

  // The orchestrator's loop: parse from the stored offset, ingest, repeat.
  const auto ingest_from_offset = [&] {
    const int64_t offset = store->run("id-r")->ingested_bytes;
    const MetricsBatch b = parse_metrics_jsonl(std::string_view(file).substr(static_cast<size_t>(offset)), "m");
    store->ingest("id-r", b, offset + b.consumed_bytes);
  };
  ingest_from_offset();
  const int64_t first_offset = store->run("id-r")->ingested_bytes;
  CHECK(first_offset == static_cast<int64_t>(file.rfind('\n') + 1));
  CHECK(store->metric_count("id-r") == 2 + 3 * 2);
  const RunRecord r = *store->run("id-r");
  CHECK(r.n_params == 4321);
  CHECK(r.n_params_nonembedding == 321);
  CHECK(r.flops_per_token == 2222.25);
  CHECK(r.tokens == 51200);
  CHECK(r.data_fingerprint == "fp-of-the-data");
  CHECK(r.n_params_active_nonembedding == 600);  // a dense trainer's row has none: the grid's stays

  // Nothing new: the same rows.
  ingest_from_offset();
  CHECK(store->run("id-r")->ingested_bytes == first_offset);
  CHECK(store->metric_count("id-r") == 8);

  // The same batch applied twice (a crash between ingest and its bookkeeping): the same rows.
  const MetricsBatch whole = batch_of(file);
  store->ingest("id-r", whole, whole.consumed_bytes);
  store->ingest("id-r", whole, whole.consumed_bytes);
  CHECK(store->metric_count("id-r") == 8);

  // The trainer finishes its line and writes more (a resume redoes step 2 with the same value).
  file += "in\",\"step\":3,\"tokens\":300,\"loss\":4.2}\n" + train_row(2, "4.5") + eval_row(3, "4.4");
  ingest_from_offset();
  CHECK(store->run("id-r")->ingested_bytes == static_cast<int64_t>(file.size()));
  CHECK(store->metrics("id-r", "train/loss").size() == 3);
  CHECK(store->metrics("id-r", "train/loss")[2].value == 4.2);
  CHECK(store->final_loss("id-r") == 4.4);
  // A batch without a "run" row leaves the counts and the fingerprint alone.
  CHECK(store->run("id-r")->n_params == 4321);
  CHECK(store->run("id-r")->data_fingerprint == "fp-of-the-data");

  store->reset_metrics("id-r");
  CHECK(store->metric_count("id-r") == 0);
  CHECK(store->run("id-r")->ingested_bytes == 0);
  CHECK_FALSE(store->final_loss("id-r").has_value());
}

TEST_CASE("sweeps store: leases exclude other owners until they expire", "[sweeps][sweeps_store]") {
  ScratchDir dir;
  auto store = Store::open(dir / "study.db", Store::Mode::read_write);
  store->record_grid(spec_of("g", dir.path(), {point("r", "ufp4", "m0"), point("s", "bf16", "m0")}));

  CHECK(store->try_lease("id-r", "A", 1000, 60));
  RunRecord r = *store->run("id-r");
  CHECK(r.state == RunState::running);
  CHECK(r.lease_owner == "A");
  CHECK(r.lease_expires == 1060);
  CHECK_FALSE(store->try_lease("id-r", "B", 1030, 60));
  CHECK(store->try_lease("id-r", "A", 1030, 60));  // the holder may take it again
  CHECK(store->run("id-r")->lease_expires == 1090);

  // A keeps it alive; B still cannot take it before it expires.
  CHECK(store->try_lease("id-s", "A", 1000, 60));
  store->renew_leases("A", 1080, 60);
  CHECK(store->run("id-r")->lease_expires == 1140);
  CHECK(store->run("id-s")->lease_expires == 1140);
  CHECK_FALSE(store->try_lease("id-r", "B", 1139, 60));

  // A dies: after expiry B takes over; A's renewals no longer touch it.
  CHECK(store->try_lease("id-r", "B", 1141, 60));
  CHECK(store->run("id-r")->lease_owner == "B");
  store->renew_leases("A", 1150, 60);
  CHECK(store->run("id-r")->lease_expires == 1201);
  CHECK(store->run("id-s")->lease_expires == 1210);

  // Releasing needs the owner.
  store->release_lease("id-r", "A");
  CHECK(store->run("id-r")->lease_owner == "B");
  store->release_lease("id-r", "B");
  CHECK(store->run("id-r")->lease_owner.empty());
  CHECK(store->run("id-r")->lease_expires == 0);

  // Outcomes are final.
  store->set_state("id-r", RunState::succeeded, "");
  CHECK_FALSE(store->try_lease("id-r", "C", 2000, 60));
  store->set_state("id-r", RunState::diverged, "non-finite training loss");
  CHECK_FALSE(store->try_lease("id-r", "C", 2000, 60));
  CHECK(store->run("id-r")->error == "non-finite training loss");
  store->set_state("id-r", RunState::failed, "disk full");
  CHECK(store->try_lease("id-r", "C", 2000, 60));  // a failed run may be retried
  CHECK_THROWS_AS(store->try_lease("id-nope", "C", 2000, 60), std::runtime_error);
  CHECK_THROWS_AS(store->set_state("id-nope", RunState::failed, ""), std::runtime_error);

  // Orphans: running runs whose lease expired before `now`.
  CHECK(store->mark_orphans(1209) == 0);
  CHECK(store->mark_orphans(1211) == 1);  // id-s (A's, expired at 1210); id-r is C's until 2060
  const RunRecord s = *store->run("id-s");
  CHECK(s.state == RunState::orphaned);
  CHECK(s.lease_owner.empty());
  CHECK(store->mark_orphans(1211) == 0);
  CHECK(store->try_lease("id-s", "B", 1300, 60));
  CHECK(store->run("id-s")->state == RunState::running);
}

TEST_CASE("sweeps store: attempts and their provenance round trip", "[sweeps][sweeps_store]") {
  ScratchDir dir;
  auto store = Store::open(dir / "study.db", Store::Mode::read_write);
  store->record_grid(spec_of("g", dir.path(), {point("r", "ufp4", "m0")}));

  const int64_t first = store->begin_attempt("id-r", provenance_of("node-1"), 100.5, 4242);
  store->end_attempt(first, AttemptEnd{1, RunState::failed, "fp4lab: failed: disk full"}, 160.25);
  CHECK(store->run("id-r")->state == RunState::failed);
  CHECK(store->run("id-r")->error == "fp4lab: failed: disk full");
  Provenance second_p = provenance_of("node-2");
  second_p.git_dirty = false;
  second_p.gpu_name = second_p.gpu_driver = second_p.cuda_version = "";
  second_p.devices = "cpu:2";
  const int64_t second = store->begin_attempt("id-r", second_p, 200, 4343);
  CHECK(second != first);
  CHECK(store->run("id-r")->attempts == 2);

  const std::vector<Store::AttemptRecord> a = store->attempts("id-r");
  REQUIRE(a.size() == 2);
  CHECK(a[0].id == first);
  CHECK(a[0].run_id == "id-r");
  CHECK(a[0].start == 100.5);
  CHECK(a[0].end == 160.25);
  CHECK(a[0].exit_code == 1);
  CHECK(a[0].error == "fp4lab: failed: disk full");
  const Provenance& p = a[0].provenance;
  const Provenance expected = provenance_of("node-1");
  CHECK(p.host == expected.host);
  CHECK(p.devices == expected.devices);
  CHECK(p.gpu_name == expected.gpu_name);
  CHECK(p.gpu_driver == expected.gpu_driver);
  CHECK(p.cuda_version == expected.cuda_version);
  CHECK(p.git_commit == expected.git_commit);
  CHECK(p.git_dirty);
  CHECK(p.fp4lab_version == expected.fp4lab_version);
  CHECK(p.libraries == expected.libraries);
  CHECK(a[1].end == 0);  // still running
  CHECK(a[1].provenance.host == "node-2");
  CHECK(a[1].provenance.devices == "cpu:2");
  CHECK_FALSE(a[1].provenance.git_dirty);
  CHECK(a[1].provenance.gpu_name.empty());
  CHECK(query_one(store->handle(), "SELECT number FROM attempts WHERE id = " + std::to_string(second)) == "2");

  store->end_attempt(second, AttemptEnd{0, RunState::succeeded, ""}, 300);
  CHECK(store->run("id-r")->state == RunState::succeeded);
  CHECK(store->run("id-r")->error.empty());
  CHECK(store->attempts("id-r")[1].exit_code == 0);
  CHECK(store->attempts("id-nope").empty());
  CHECK_THROWS_AS(store->begin_attempt("id-nope", second_p, 1, 1), std::runtime_error);
  CHECK_THROWS_AS(store->end_attempt(9999, AttemptEnd{}, 1), std::runtime_error);
}

TEST_CASE("sweeps store: the views give the final losses and the BF16 gap of a hand-built study",
          "[sweeps][sweeps_store]") {
  ViewStudy study;
  sqlite3* db = study.store->handle();

  CHECK(study.store->final_loss("id-bf16-s0") == 3.0);
  CHECK(study.store->final_loss("id-ufp4-s0") == 3.15);
  CHECK_FALSE(study.store->final_loss("id-bf16-s1").has_value());

  // final_losses: one row per run with an eval/loss, at its largest step.
  CHECK(query_int(db, "SELECT count(*) FROM final_losses") == 4);
  CHECK(query_one(db, "SELECT final_step || ' ' || final_loss FROM final_losses WHERE id = 'id-ufp4-s0'") ==
        "200 3.15");
  CHECK(query_one(db, "SELECT final_loss IS NULL AND final_is_nan = 1 FROM final_losses WHERE id = 'id-nvfp4-s0'") ==
        "1");
  CHECK(query_one(db, "SELECT recipe || ' ' || model || ' ' || n_params || ' ' || n_params_nonembedding || ' ' || "
                      "tokens || ' ' || seed || ' ' || state FROM final_losses WHERE id = 'id-bf16-s0'") ==
        "bf16 d2 1000 600 50000 0 succeeded");

  // bf16_gap: the quantized runs whose baseline (same match_key) has a finite final loss. e2m1-s1's
  // baseline bf16-s1 has no loss, so e2m1-s1 is not there; nvfp4 diverged, so its gap is NULL.
  CHECK(query_int(db, "SELECT count(*) FROM bf16_gap") == 2);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(db,
                             "SELECT recipe, model, n_params_nonembedding, tokens, seed, loss, bf16_loss, gap, bf16_id "
                             "FROM bf16_gap WHERE id = 'id-ufp4-s0'",
                             -1, &s, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(s) == SQLITE_ROW);
  CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, 0))) == "ufp4");
  CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, 1))) == "d2");
  CHECK(sqlite3_column_int64(s, 2) == 600);
  CHECK(sqlite3_column_int64(s, 3) == 50000);
  CHECK(sqlite3_column_int64(s, 4) == 0);
  CHECK(sqlite3_column_double(s, 5) == 3.15);
  CHECK(sqlite3_column_double(s, 6) == 3.0);
  // By hand: 3.15 / 3.0 - 1 = 0.05.
  CHECK(sqlite3_column_double(s, 7) == Approx(0.05).epsilon(1e-12));
  CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, 8))) == "id-bf16-s0");
  sqlite3_finalize(s);
  CHECK(query_one(db, "SELECT loss IS NULL AND gap IS NULL FROM bf16_gap WHERE id = 'id-nvfp4-s0'") == "1");

  // run_progress: the last train step and loss; runs without any keep a row with NULLs.
  CHECK(query_one(db, "SELECT last_step || ' ' || last_train_loss || ' ' || done FROM run_progress "
                      "WHERE id = 'id-ufp4-s0'") == "200 3.1 0.4");
  CHECK(query_one(db, "SELECT last_step IS NULL AND done = 0 FROM run_progress WHERE id = 'id-bf16-s1'") == "1");
  CHECK(query_int(db, "SELECT count(*) FROM run_progress") == 5);
}

TEST_CASE("sweeps store: every example query in the docs runs, and the docs name every table and view",
          "[sweeps][sweeps_store]") {
  const std::string doc = store_doc_section();
  REQUIRE_FALSE(doc.empty());
  const std::vector<std::string> blocks = fp4::test::sql_blocks(doc);
  REQUIRE(blocks.size() >= 5);

  ViewStudy study;
  study.store->begin_attempt("id-ufp4-s0", provenance_of("node-1"), 10, 1);
  sqlite3* db = study.store->handle();
  for (const std::string& block : blocks) fp4::test::run_statements(db, block);

  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view')", -1, &s, nullptr) ==
          SQLITE_OK);
  while (sqlite3_step(s) == SQLITE_ROW) {
    const std::string name = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    INFO("not in the docs: " << name);
    CHECK(doc.find("`" + name + "`") != std::string::npos);
  }
  sqlite3_finalize(s);
}

TEST_CASE("sweeps store: a version-1 file is migrated and its rows survive", "[sweeps][sweeps_store]") {
  ScratchDir dir;
  const auto path = dir / "old.db";
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    fp4::store::detail::migrate_store(db, path, 1);
    CHECK(query_int(db, "PRAGMA user_version") == 1);
    CHECK(query_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'probes'") == 0);
    exec_sql(db, R"sql(
      INSERT INTO grids (text_hash, name, file, base_dir, run_root, axis_names, fit_json, text, created)
        VALUES ('h1', 'old', '/g.toml', '/', '/runs', '["recipe"]', '{}', 'toml', 1.0);
      INSERT INTO runs (id, name, config_json, match_key, recipe, baseline, model, n_params, n_params_nonembedding,
                        tokens, seed, flops_per_token, state, attempts, dir, created, updated)
        VALUES ('r1', 'old-run', '{}', 'm', 'ufp4', 0, 'd2', 10, 6, 500, 3, 36.0, 'succeeded', 1, '/runs/r1', 1, 1);
      INSERT INTO grid_runs (grid, run, position, name, axes_json) VALUES (1, 'r1', 0, 'old-run', '{}');
      INSERT INTO attempts (run, number, host, devices, pid, started, ended, exit_code, state, error)
        VALUES ('r1', 1, 'oldhost', 'cpu:1', 7, 5.0, 6.0, 0, 'succeeded', '');
      INSERT INTO metrics (run, key, step, tokens, value, is_nan) VALUES ('r1', 'eval/loss', 10, 500, 2.75, 0);
    )sql");
    sqlite3_close(db);
  }

  // Read-only cannot migrate: refused, saying what to do.
  const std::string refused = user_error([&] { Store::open(path, Store::Mode::read_only); }, path);
  CHECK(refused.find("version 1 is older") != std::string::npos);
  CHECK(refused.find("migrate") != std::string::npos);

  auto store = Store::open(path, Store::Mode::read_write);
  CHECK(store->schema_version() == Store::latest_schema_version());
  CHECK(query_one(store->handle(), "PRAGMA journal_mode") == "wal");
  const RunRecord r = *store->run("r1");
  CHECK(r.name == "old-run");
  CHECK(r.state == RunState::succeeded);
  CHECK(r.seed == 3);
  CHECK(r.ingested_bytes == 0);  // the column version 2 added, at its default
  CHECK(store->final_loss("r1") == 2.75);
  CHECK(store->runs_of_grid("h1").size() == 1);
  const auto attempts = store->attempts("r1");
  REQUIRE(attempts.size() == 1);
  CHECK(attempts[0].provenance.host == "oldhost");
  CHECK(attempts[0].provenance.git_commit.empty());  // no provenance before version 2
  CHECK(query_one(store->handle(), "SELECT final_loss FROM final_losses WHERE id = 'r1'") == "2.75");
  // The migrated file works as a new one.
  store->ingest("r1", batch_of(eval_row(20, "2.5")), 99);
  CHECK(store->final_loss("r1") == 2.5);
  store.reset();
  CHECK(Store::open(path, Store::Mode::read_only)->schema_version() == Store::latest_schema_version());
}

TEST_CASE("sweeps store: a version-3 file learns the data fingerprints at its next ingest", "[sweeps][sweeps_store]") {
  // Version 4 adds runs.data_fingerprint and sets every ingested_bytes back to 0, so that the next
  // ingest reads each metrics.jsonl from its run row again.
  ScratchDir dir;
  const auto path = dir / "v3.db";
  write_old_store(path, 3, R"sql(
    INSERT INTO runs (id, name, config_json, match_key, recipe, baseline, model, n_params, n_params_nonembedding,
                      tokens, seed, flops_per_token, state, attempts, dir, created, updated, ingested_bytes)
      VALUES ('r3', 'v3-run', '{}', 'm', 'ufp4', 0, 'd2', 10, 6, 500, 3, 36.0, 'succeeded', 1, '/runs/r3', 1, 1, 4096);
  )sql");
  // Read-only, refused; read_migrating migrates it and reads it.
  user_error([&] { Store::open(path, Store::Mode::read_only); }, path);
  auto store = Store::open(path, Store::Mode::read_migrating);
  CHECK(store->schema_version() == Store::latest_schema_version());
  RunRecord r = *store->run("r3");
  CHECK(r.ingested_bytes == 0);
  CHECK(r.data_fingerprint.empty());
  store.reset();
  store = Store::open(path, Store::Mode::read_write);
  store->ingest("r3", batch_of(R"({"kind":"run","step":0,"tokens":0,"event":"start","data_fingerprint":"fp3"})"
                               "\n" + eval_row(10, "2.5")),
                64);
  r = *store->run("r3");
  CHECK(r.data_fingerprint == "fp3");
  CHECK(r.ingested_bytes == 64);
}

TEST_CASE("sweeps store: version 5 keeps each run's numerics identity, older runs' from their commit",
          "[sweeps][sweeps_store][numerics]") {
  // Migration 5 gives every run recorded before identities the identity of its latest attempt's
  // commit (base/numerics_identity.h: 1 before 5ac9441, 2 from it on), none to a run whose commit
  // it does not know or that never started; ingest then takes the trainer's own from its run row.
  ScratchDir dir;
  const auto path = dir / "v4.db";
  std::string sql;
  int attempt = 0;
  auto run = [&](const std::string& id, const std::string& state) {
    sql += "INSERT INTO runs (id, name, config_json, match_key, recipe, baseline, model, n_params, "
           "n_params_nonembedding, tokens, seed, flops_per_token, state, attempts, dir, created, updated) VALUES ('" +
           id + "', '" + id + "', '{}', 'm-" + id + "', 'bf16', 1, 'd2', 10, 6, 500, 0, 36.0, '" + state +
           "', 1, '/runs/" + id + "', 1, 1);\n";
  };
  auto attempt_at = [&](const std::string& id, int number, const std::string& commit) {
    ++attempt;
    sql += fmt::format("INSERT INTO attempts (id, run, number, host, devices, pid, started) VALUES ({}, '{}', {}, 'h', "
                       "'cuda:0', 1, 1);\n",
                       attempt, id, number);
    sql += fmt::format("INSERT INTO provenance VALUES ({}, 'NVIDIA H200', '', '', '{}', 0, '0.1.0', '{{}}');\n", attempt,
                       commit);
  };
  run("first-study", "succeeded");  // the first study's binary
  attempt_at("first-study", 1, "8ddfdcd009ca6e1c5fb33b9b3a3d19b0b1f6a9c1");
  run("resumed", "succeeded");      // resumed by a binary of identity 2: its latest attempt's counts
  attempt_at("resumed", 1, "8de04ece6660");
  attempt_at("resumed", 2, "b334f98d2a7c");
  run("elsewhere", "succeeded");    // a commit of no known history
  attempt_at("elsewhere", 1, "0123456789abcdef0123456789abcdef01234567");
  run("never", "pending");
  write_old_store(path, 4, sql);
  auto store = Store::open(path, Store::Mode::read_write);
  CHECK(store->run("first-study")->numerics == 1);
  CHECK(store->run("resumed")->numerics == 2);
  CHECK_FALSE(store->run("elsewhere")->numerics.has_value());
  CHECK_FALSE(store->run("never")->numerics.has_value());
  // The trainer's run row sets it; a batch without one leaves it.
  store->ingest("never", batch_of(R"({"kind":"run","step":0,"tokens":0,"event":"start","numerics":7})"
                                  "\n"),
                64);
  CHECK(store->run("never")->numerics == 7);
  store->ingest("never", batch_of(eval_row(10, "2.5")), 128);
  CHECK(store->run("never")->numerics == 7);
}

TEST_CASE("sweeps store: migrating commits once, so no reader sees a version between", "[sweeps][sweeps_store]") {
  // A store being created goes from version 0 to the latest in one commit: a read-only open beside
  // it (`sweep status` next to the first `sweep run`) sees an empty file or the finished schema,
  // never an intermediate version it would refuse as too old. Likewise an old file's upgrade.
  ScratchDir dir;
  for (int from : {0, 1}) {
    const auto path = dir / ("from" + std::to_string(from) + ".db");
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    if (from > 0) fp4::store::detail::migrate_store(db, path, from);
    int commits = 0;
    sqlite3_commit_hook(
        db, [](void* n) { ++*static_cast<int*>(n); return 0; }, &commits);
    fp4::store::detail::migrate_store(db, path, Store::latest_schema_version());
    INFO("from version " << from);
    CHECK(commits == 1);
    CHECK(query_int(db, "PRAGMA user_version") == Store::latest_schema_version());
    sqlite3_commit_hook(db, nullptr, nullptr);
    sqlite3_close(db);
  }
}

TEST_CASE("sweeps store: files that are not a usable store are refused with one line", "[sweeps][sweeps_store]") {
  ScratchDir dir;

  SECTION("read-only open of a missing file") {
    const auto path = dir / "missing.db";
    CHECK(user_error([&] { Store::open(path, Store::Mode::read_only); }, path).find("no such sweep store") !=
          std::string::npos);
    CHECK_FALSE(std::filesystem::exists(path));
  }
  SECTION("a file that is not SQLite") {
    const auto path = dir / "grid.toml";
    fp4::test::spit(path, "[sweep]\nname = \"oops, this is the TOML file\"\n" + std::string(4096, '#'));
    for (Store::Mode mode : {Store::Mode::read_write, Store::Mode::read_only})
      CHECK(user_error([&] { Store::open(path, mode); }, path).find("not an SQLite database") != std::string::npos);
    CHECK(fp4::test::slurp(path).rfind("[sweep]", 0) == 0);  // left as it was
  }
  SECTION("another program's SQLite database") {
    const auto path = dir / "other.db";
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    exec_sql(db, "CREATE TABLE runs (x INTEGER)");
    sqlite3_close(db);
    CHECK(user_error([&] { Store::open(path, Store::Mode::read_write); }, path).find("not an fp4lab sweep store") !=
          std::string::npos);
  }
  SECTION("a store from a newer fp4lab") {
    const auto path = dir / "new.db";
    Store::open(path, Store::Mode::read_write).reset();
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    exec_sql(db, "PRAGMA user_version = " + std::to_string(Store::latest_schema_version() + 1));
    sqlite3_close(db);
    for (Store::Mode mode : {Store::Mode::read_write, Store::Mode::read_only})
      CHECK(user_error([&] { Store::open(path, mode); }, path).find("is newer than this fp4lab knows") !=
            std::string::npos);
  }
  SECTION("a directory") {
    const auto path = dir / "runs";
    std::filesystem::create_directories(path);
    for (Store::Mode mode : {Store::Mode::read_write, Store::Mode::read_only, Store::Mode::read_if_present})
      CHECK(user_error([&] { Store::open(path, mode); }, path).find("is a directory, not a sweep store") !=
            std::string::npos);
  }
  SECTION("read-only open of an empty file") {
    const auto path = dir / "empty.db";
    fp4::test::spit(path, "");
    CHECK(user_error([&] { Store::open(path, Store::Mode::read_only); }, path).find("empty") != std::string::npos);
  }
}

TEST_CASE("sweeps store: several processes writing at once never see database is locked", "[sweeps][sweeps_store]") {
  ScratchDir dir;
  const auto path = dir / "busy.db";  // not created yet: the writers race to create and migrate it
  constexpr int kWriters = 3;
  constexpr int kRounds = 80;

  // Every writer records the same grid (idempotent), then works on its own run while leasing a
  // shared one; a reader polls the views meanwhile. A pipe starts them all at the same moment.
  std::vector<GridPointRecord> points = {point("shared", "bf16", "m0")};
  for (int w = 0; w < kWriters; ++w) points.push_back(point("w" + std::to_string(w), "ufp4", "m" + std::to_string(w)));
  const GridRecord spec = spec_of("busy", dir.path(), points);

  int start_pipe[2];
  REQUIRE(pipe(start_pipe) == 0);
  const auto wait_for_start = [&] {
    close(start_pipe[1]);
    char c;
    while (read(start_pipe[0], &c, 1) > 0) {
    }
  };
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    children.push_back(spawn(
        [&, w] {
          wait_for_start();
          auto store = Store::open(path, Store::Mode::read_write);
          store->record_grid(spec);
          const std::string mine = "id-w" + std::to_string(w), owner = "owner-" + std::to_string(w);
          for (int round = 0; round < kRounds; ++round) {
            std::string text;
            for (int k = 0; k < 4; ++k) text += train_row(round * 4 + k + 1, std::to_string(5.0 - round * 0.01));
            const MetricsBatch b = parse_metrics_jsonl(text, "m");
            store->ingest(mine, b, (round + 1) * b.consumed_bytes);
            const int64_t attempt = store->begin_attempt(mine, provenance_of("host"), round, getpid());
            store->end_attempt(attempt, AttemptEnd{0, RunState::running, ""}, round + 0.5);
            if (store->try_lease("id-shared", owner, round, 0.001)) store->release_lease("id-shared", owner);
            store->renew_leases(owner, round, 60);
            store->mark_orphans(round);
            store->record_grid(spec);
          }
        },
        dir / ("writer-" + std::to_string(w) + ".err")));
  }
  children.push_back(spawn(
      [&] {
        wait_for_start();
        auto store = Store::open(path, Store::Mode::read_write);
        for (int round = 0; round < kRounds; ++round) {
          for (const RunRecord& r : store->runs()) store->metrics(r.id, "train/loss");
          store->final_loss("id-w0");
          Store::open(path, Store::Mode::read_only)->runs();
        }
      },
      dir / "reader.err"));
  close(start_pipe[0]);
  close(start_pipe[1]);

  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    REQUIRE(waitpid(children[i], &status, 0) == children[i]);
    const auto err = i < kWriters ? dir / ("writer-" + std::to_string(i) + ".err") : dir / "reader.err";
    INFO("child " << i << ": " << (std::filesystem::exists(err) ? fp4::test::slurp(err) : std::string("no error")));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  auto store = Store::open(path, Store::Mode::read_only);
  CHECK(store->runs().size() == kWriters + 1);
  for (int w = 0; w < kWriters; ++w) {
    const std::string id = "id-w" + std::to_string(w);
    CHECK(store->metric_count(id) == int64_t{kRounds} * 4 * 3);
    CHECK(store->run(id)->attempts == kRounds);
    CHECK(store->attempts(id).size() == static_cast<size_t>(kRounds));
  }
  CHECK(query_int(store->handle(), "SELECT count(*) FROM grids") == 1);
}

TEST_CASE("sweeps store: the active parameter count is recorded, reported by an MoE trainer, and migrated",
          "[sweeps][sweeps_store][moe]") {
  ScratchDir dir;
  {
    auto store = Store::open(dir / "study.db", Store::Mode::read_write);
    GridPointRecord moe = point("moe", "ufp4", "m0");
    moe.n_params_nonembedding = 2400;
    moe.n_params_active_nonembedding = 800;
    store->record_grid(spec_of("g", dir.path(), {moe}));
    CHECK(store->run("id-moe")->n_params_active_nonembedding == 800);
    store->ingest("id-moe",
                  batch_of(R"({"kind":"run","step":0,"tokens":0,"event":"start","n_params_nonembedding":2401,)"
                           R"("n_params_active_nonembedding":801})" "\n"),
                  10);
    const RunRecord r = *store->run("id-moe");
    CHECK(r.n_params_nonembedding == 2401);
    CHECK(r.n_params_active_nonembedding == 801);
    CHECK(store->runs_of_grid("hash-of-g").front().n_params_active_nonembedding == 801);
  }
  // A version-4 file: its runs are dense, so the active count is the non-embedding count.
  const auto path = dir / "v4.db";
  write_old_store(path, 4, R"sql(
    INSERT INTO runs (id, name, config_json, match_key, recipe, baseline, model, n_params, n_params_nonembedding,
                      tokens, seed, flops_per_token, state, attempts, dir, created, updated)
      VALUES ('r4', 'v4-run', '{}', 'm', 'ufp4', 0, 'd2', 10, 6, 500, 3, 36.0, 'succeeded', 1, '/runs/r4', 1, 1);
  )sql");
  auto store = Store::open(path, Store::Mode::read_migrating);
  CHECK(store->run("r4")->n_params_active_nonembedding == 6);
}
