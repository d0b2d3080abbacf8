// test_sweeps_spec.cpp — the sweep spec (docs/sweeps.md, "The TOML spec"): a full example, every way
// a spec can be wrong refused at its exact file:line:col, and run identity (what changes an id and
// what must not).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "base/user_error.h"
#include "engine/model/model_shape.h"
#include "engine/run/config.h"
#include "fit/contrasts.h"
#include "sweeps/spec.h"
#include "test_support.h"

using fp4::sweeps::compact_count;
using fp4::sweeps::GridPoint;
using fp4::sweeps::parse_sweep_spec;
using fp4::sweeps::SweepSpec;
using nlohmann::json;

namespace {

SweepSpec parse(const std::string& text, const std::string& file = "spec.toml") {
  return parse_sweep_spec(text, file, "/study");
}

// The one-line message a spec is refused with.
std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const fp4::UserError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find('\n') == std::string::npos);
    return what;
  }
  FAIL("no error for:\n" << text);
  return {};
}

std::set<std::string> ids_of(const SweepSpec& s) {
  std::set<std::string> ids;
  for (const GridPoint& p : s.points) ids.insert(p.id);
  return ids;
}

const GridPoint& point_named(const SweepSpec& s, const std::string& name) {
  for (const GridPoint& p : s.points)
    if (p.name == name) return p;
  std::string names;
  for (const GridPoint& p : s.points) names += p.name + " ";
  FAIL("no point " << name << " among: " << names);
  throw std::logic_error("unreachable");
}

// The single point of a one-point spec.
const GridPoint& only_point(const SweepSpec& s) {
  REQUIRE(s.points.size() == 1);
  return s.points[0];
}

std::string only_id(const std::string& text) { return only_point(parse(text)).id; }

// Seven lines every malformed case below starts from; a case's own lines start at line 8, inside
// [train] (so a case may add train keys before opening its own tables).
const std::string kPrelude =
    "[sweep]\n"                                      // 1
    "name = \"t\"\n"                                 // 2
    "[data]\n"                                       // 3
    "source = \"synthetic:markov?order=1&vocab=64\"\n"  // 4
    "[train]\n"                                      // 5
    "batch_tokens = 4096\n"                          // 6
    "micro_batch = 4\n";                             // 7

// One point: d2, 65536 tokens, bf16, seed 0 — the base the identity tests vary one field of.
std::string one_point_spec(const std::string& train_extra = "", const std::string& grid = "",
                           const std::string& model = "preset = \"d2\"\n",
                           const std::string& data = "synthetic:markov?order=1&vocab=64") {
  return "[sweep]\nname = \"one\"\n[data]\nsource = \"" + data + "\"\n[model]\n" + model +
         "[train]\nbatch_tokens = 4096\nmicro_batch = 4\ntokens = 65536\n" + train_extra + "[grid]\n" + grid;
}

}  // namespace

TEST_CASE("sweep spec: a full example parses, expands and resolves every point", "[sweeps][sweeps_spec]") {
  const std::string text = R"(# a small study
[sweep]
name = "small-study"
run_root = "out/runs"

[data]
source = "data/prose"

[model]
seq_len = 128

[train]
batch_tokens = 16384
micro_batch = 8
lr = 2e-3

[eval]
every = 50
tokens = 16384

[probe]
every = 100

[checkpoint]
every = 0

[grid]
model = ["d2", {n_layers = 3, d_model = 256}]
tokens = ["1M", 2_000_000]
recipe = ["bf16", "ufp4", "ufp4-no-sr"]
seed = [0, 1]
train.lr = [1e-3, 3e-3]

[recipes.ufp4-no-sr]
base = "ufp4"
sr = []

[executor]
gpus = [0, 1]
runs_per_gpu = 2
cpu_jobs = 2
threads_per_job = 1
max_attempts = 4
order = "declared"
heartbeat_timeout_s = 90.5

[fit]
law = ["chinchilla", "precision"]
n = "total"
bootstrap = 200
seed = 7
huber_delta = 1e-3
targets = [{n = 1.5e9, d = 1e11}]
)";
  const SweepSpec s = parse_sweep_spec(text, "study/small.toml", "/abs/study");
  CHECK(s.name == "small-study");
  CHECK(s.file == "study/small.toml");
  CHECK(s.base_dir == "/abs/study");
  CHECK(s.text == text);
  CHECK(s.text_hash == fp4::sha256_hex(text));
  CHECK(s.store == "/abs/study/small-study.db");
  CHECK(s.run_root == "/abs/study/out/runs");

  CHECK(s.executor.gpus == std::vector<std::string>{"0", "1"});
  CHECK(s.executor.runs_per_gpu == 2);
  CHECK(s.executor.cpu_jobs == 2);
  CHECK(s.executor.threads_per_job == 1);
  CHECK(s.executor.max_attempts == 4);
  CHECK(s.executor.order == "declared");
  CHECK(s.executor.heartbeat_timeout_s == 90.5);
  CHECK(fp4::store::fit_table_json(s.fit) == json::parse(R"({"law": ["chinchilla", "precision"], "n": "total", "bootstrap": 200, "seed": 7,
                                 "huber_delta": 0.001, "targets": [{"n": 1.5e9, "d": 1e11}]})"));

  // Declaration order, whatever order toml++ keeps its keys in.
  CHECK(s.axis_names == std::vector<std::string>{"model", "tokens", "recipe", "seed", "train.lr"});
  REQUIRE(s.points.size() == 2 * 2 * 3 * 2 * 2);
  // The first axis varies slowest, the last fastest.
  CHECK(s.points[0].axes.at("model") == "d2");
  CHECK(s.points[0].axes.at("train.lr") == "0.001");
  CHECK(s.points[1].axes.at("train.lr") == "0.003");
  CHECK(s.points[1].axes.at("model") == "d2");
  CHECK(s.points[24].axes.at("model") == R"({"d_model":256,"n_layers":3})");

  std::set<std::string> names, ids;
  for (const GridPoint& p : s.points) {
    names.insert(p.name);
    ids.insert(p.id);
    // Every point is a resolved config: reading it back gives the same bytes and id.
    const fp4::run::RunConfig again = fp4::run::config_from_json(p.config, "again");
    CHECK(fp4::run::config_canonical(again) == p.canonical);
    CHECK(fp4::run::config_hash(again) == p.id);
    CHECK(p.id.size() == 64);
    CHECK(p.config.at("data") == "data/prose");  // as given: relative to the study's directory
    CHECK(p.config.at("model").at("seq_len") == 128);
    CHECK(p.config.at("eval").at("every") == 50);
    CHECK(p.config.at("probe").at("every") == 100);
    CHECK(p.config.at("checkpoint").at("every") == 0);
    CHECK(p.config.at("device") == "cpu");
    CHECK(p.tokens == p.config.at("train").at("tokens").get<int64_t>());
    CHECK(p.seed == p.config.at("train").at("seed").get<uint64_t>());
    CHECK(p.baseline == (p.recipe_label == "bf16"));
  }
  CHECK(names.size() == s.points.size());
  CHECK(ids.size() == s.points.size());

  const GridPoint& d2 = point_named(s, "d2-1.02M-ufp4-no-sr-s1-lr0.003");
  CHECK(d2.model_label == "d2");
  CHECK(d2.recipe_label == "ufp4-no-sr");
  CHECK_FALSE(d2.baseline);
  CHECK(d2.tokens == 1015808);  // 1M rounded up to whole steps of 16384
  CHECK(d2.seed == 1);
  CHECK(d2.config.at("train").at("lr") == 0.003);
  CHECK(d2.config.at("recipe").at("slots").at("dgrad_dy").at("sr") == false);
  CHECK(d2.axes == std::map<std::string, std::string>{{"model", "d2"}, {"tokens", "1000000"}, {"recipe", "ufp4-no-sr"},
                                                      {"seed", "1"}, {"train.lr", "0.003"}});
  fp4::model::ModelShape shape = fp4::model::model_preset("d2");  // the data is bytes: vocabulary 256
  CHECK(d2.n_params_nonembedding == fp4::model::nonembedding_params(shape));
  CHECK(d2.n_params == fp4::model::total_params(shape));
  CHECK(d2.flops_per_token == fp4::model::train_flops_per_token(shape, 128));

  const GridPoint& explicit_dims = point_named(s, "L3-d256-2.02M-bf16-s0-lr0.001");
  CHECK(explicit_dims.model_label == "L3-d256");
  CHECK(explicit_dims.baseline);
  CHECK(explicit_dims.config.at("model").at("preset") == "custom");
  CHECK(explicit_dims.config.at("model").at("d_ff") == 704);

  // Runs that differ only in their recipe share the match key (the BF16-relative gap's pairing).
  const GridPoint& bf16 = point_named(s, "d2-1.02M-bf16-s1-lr0.003");
  const GridPoint& ufp4 = point_named(s, "d2-1.02M-ufp4-s1-lr0.003");
  CHECK(bf16.match_key == ufp4.match_key);
  CHECK(bf16.match_key == d2.match_key);
  CHECK(bf16.match_key != point_named(s, "d2-1.02M-bf16-s0-lr0.003").match_key);
  CHECK(bf16.id != ufp4.id);
}

TEST_CASE("sweep spec: the example in docs/sweeps.md parses", "[sweeps][sweeps_spec]") {
  const std::string doc = fp4::test::slurp(std::string(FP4LAB_SOURCE_DIR) + "/docs/sweeps.md");
  const size_t section = doc.find("## The TOML spec");
  REQUIRE(section != std::string::npos);
  const size_t start = doc.find("```toml\n", section);
  REQUIRE(start != std::string::npos);
  const size_t end = doc.find("```\n", start + 8);
  REQUIRE(end != std::string::npos);
  const SweepSpec s = parse(doc.substr(start + 8, end - start - 8), "first-study.toml");
  CHECK(s.name == "first-study");
  CHECK(s.points.size() == 5 * 3 * 4);
  const GridPoint& p = point_named(s, "d4-25M-ufp4-s0");
  CHECK(p.config.at("recipe").at("name") == "ufp4");
  CHECK(p.tokens == 25034752);
}

TEST_CASE("sweep spec: malformed specs are refused at their file:line:col with the key", "[sweeps][sweeps_spec]") {
  struct Case {
    const char* what;
    std::string text;
    const char* at;   // "file:line:col"
    const char* key;  // what the message must name
  };
  const std::vector<Case> cases = {
      {"TOML syntax", kPrelude + "tokens = 65536\nlr = 0.001 0.002\n", "spec.toml:9:12", "malformed TOML"},
      {"unknown table", kPrelude + "tokens = 65536\n[sweeps]\nname = \"x\"\n", "spec.toml:9:2", "sweeps"},
      {"unknown train key", kPrelude + "learning_rate = 0.01\n", "spec.toml:8:1", "train.learning_rate"},
      {"wrong type", kPrelude + "tokens = 65536\nlr = \"fast\"\n", "spec.toml:9:6", "train.lr"},
      {"not finite", kPrelude + "tokens = 65536\nlr = nan\n", "spec.toml:9:6", "train.lr"},
      {"engine range check on a base value", kPrelude + "tokens = 65536\nlr = -1\n[model]\npreset = \"d2\"\n",
       "spec.toml:9:6", "train.lr"},
      {"engine range check on an axis value",
       kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[grid]\n\"train.lr\" = [0.001, -0.5]\n", "spec.toml:12:22",
       "grid.train.lr"},
      {"tokens <= 0", kPrelude + "[model]\npreset = \"d2\"\n[grid]\ntokens = [65536, 0]\n", "spec.toml:11:18",
       "grid.tokens"},
      {"token count text", kPrelude + "[model]\npreset = \"d2\"\n[grid]\ntokens = [\"25X\"]\n", "spec.toml:11:11",
       "grid.tokens"},
      {"empty axis", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[grid]\nseed = []\n", "spec.toml:12:8",
       "grid.seed"},
      {"an axis that is not an array", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[grid]\nseed = 0\n",
       "spec.toml:12:8", "grid.seed"},
      {"duplicate values spelled differently",
       kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[grid]\n\"train.lr\" = [1e-3, 0.001]\n", "spec.toml:12:21",
       "grid.train.lr"},
      {"duplicate token counts", kPrelude + "[model]\npreset = \"d2\"\n[grid]\ntokens = [25_000_000, \"25M\"]\n",
       "spec.toml:11:23", "grid.tokens"},
      {"negative seed", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[grid]\nseed = [0, -1]\n",
       "spec.toml:12:12", "grid.seed"},
      {"unknown recipe", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[grid]\nrecipe = [\"ufp4\", \"ufp5\"]\n",
       "spec.toml:12:19", "grid.recipe"},
      {"unknown model preset", kPrelude + "tokens = 65536\n[grid]\nmodel = [\"d2\", \"d99\"]\n", "spec.toml:10:16",
       "grid.model"},
      {"wrong type inside a model value",
       kPrelude + "tokens = 65536\n[grid]\nmodel = [{n_layers = \"two\", d_model = 128}]\n", "spec.toml:10:22",
       "grid.model.n_layers"},
      {"a model value's dimension off the recipe's block",
       kPrelude + "tokens = 65536\n[grid]\nmodel = [{n_layers = 2, d_model = 128, d_ff = 200}]\nrecipe = [\"ufp4\"]\n",
       "spec.toml:10:10", "grid.model"},
      {"a base dimension off the block of one recipe",
       kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\nd_ff = 200\n[grid]\nrecipe = [\"bf16\", \"ufp4\"]\n",
       "spec.toml:13:19", "grid.recipe"},
      {"a custom recipe's bf16_layers beyond the model",
       kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[recipes.mine]\nbase = \"ufp4\"\nbf16_layers = [5]\n"
                  "[grid]\nrecipe = [\"mine\"]\n",
       "spec.toml:15:11", "grid.recipe"},
      {"unknown axis", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[grid]\ntrain.learning_rate = [0.1]\n",
       "spec.toml:12:7", "grid.train.learning_rate"},
      {"one axis declared twice",
       kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[grid]\ntrain.lr = [0.1]\n\"train.lr\" = [0.2]\n",
       "spec.toml:13:1", "grid.train.lr"},
      {"tokens and tokens_per_param", kPrelude + "[model]\npreset = \"d2\"\n[grid]\ntokens = [65536]\ntokens_per_param = [20]\n",
       "spec.toml:12:1", "grid.tokens_per_param"},
      {"a tokens axis beside train.steps", kPrelude + "steps = 10\n[model]\npreset = \"d2\"\n[grid]\ntokens = [65536]\n",
       "spec.toml:8:9", "train.steps"},
      {"a model axis beside [model] n_layers", kPrelude + "tokens = 65536\n[model]\nn_layers = 4\n[grid]\nmodel = [\"d2\"]\n",
       "spec.toml:10:12", "model.n_layers"},
      {"eval.tokens off seq_len", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[eval]\ntokens = 1000\n",
       "spec.toml:12:10", "eval.tokens"},
      {"a recipe shadowing a preset", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[recipes.ufp4]\nbase = \"ufp4\"\n",
       "spec.toml:11:10", "recipes.ufp4"},
      {"unknown recipe field",
       kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[recipes.mine]\nbase = \"ufp4\"\ngrids = \"e1m2\"\n",
       "spec.toml:13:1", "recipes.mine.grids"},
      {"a recipe value the engine refuses",
       kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[recipes.mine]\nbase = \"ufp4\"\ngrid = \"e3m0\"\n",
       "spec.toml:13:8", "recipes.mine.grid"},
      {"a slot override the engine refuses",
       kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[recipes.mine]\nbase = \"ufp4\"\n"
                  "[recipes.mine.slots.wgrad_x]\nsr = 3\n",
       "spec.toml:14:6", "recipes.mine.slots.wgrad_x.sr"},
      {"executor.runs_per_gpu < 1", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[executor]\nruns_per_gpu = 0\n",
       "spec.toml:12:16", "executor.runs_per_gpu"},
      {"executor.order", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[executor]\norder = \"random\"\n",
       "spec.toml:12:9", "executor.order"},
      {"fit.law", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[fit]\nlaw = [\"chinchilla\", \"linear\"]\n",
       "spec.toml:12:22", "fit.law"},
      {"fit.targets without d", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[fit]\ntargets = [{n = 1.5e9}]\n",
       "spec.toml:12:12", "fit.targets.d"},
      {"a date", kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n[fit]\nseed = 2024-01-01\n", "spec.toml:12:8",
       "fit.seed"},
      {"no model anywhere", kPrelude + "tokens = 65536\n", "spec.toml:1:1", "model"},
      {"no run length", kPrelude + "[model]\npreset = \"d2\"\n", "spec.toml:5:1", "train"},
      {"tokens_per_param <= 0", kPrelude + "[grid]\nmodel = [\"d2\"]\ntokens_per_param = [0]\n", "spec.toml:10:21",
       "grid.tokens_per_param"},
      {"sweep name", "[sweep]\nname = \"my study\"\n[data]\nsource = \"d\"\n", "spec.toml:2:8", "sweep.name"},
      {"no [data]", "[sweep]\nname = \"t\"\n", "spec.toml:1:1", "data"},
      {"a bad synthetic source", "[sweep]\nname = \"t\"\n[data]\nsource = \"synthetic:markov?order=99\"\n",
       "spec.toml:4:10", "data.source"},
      {"a device the engine refuses",
       "[sweep]\nname = \"t\"\ndevice = \"tpu\"\n[data]\nsource = \"d\"\n[model]\npreset = \"d2\"\n[train]\ntokens = 65536\n",
       "spec.toml:3:10", "sweep.device"},
  };
  REQUIRE(cases.size() >= 20);
  for (const Case& c : cases) {
    INFO(c.what << ":\n" << c.text);
    const std::string message = error_of(c.text);
    INFO(message);
    CHECK(message.rfind(std::string(c.at) + ": ", 0) == 0);
    CHECK(message.find(c.key) != std::string::npos);
  }
}

TEST_CASE("sweep spec: a runaway grid is refused before its values are read", "[sweeps][sweeps_spec]") {
  const auto seeds = [](int n, const std::string& middle) {
    std::string axis = "seed = [";
    for (int i = 0; i < n; ++i) axis += (i ? ", " : "") + (i == n / 2 ? middle : std::to_string(i));
    return axis + "]\n";
  };
  const std::string base = kPrelude + "tokens = 65536\n[model]\npreset = \"d1\"\n[grid]\n";
  // 150001 values with a string among them: the count is refused first, so no value was read.
  std::string e = error_of(base + seeds(150001, "\"x\""));
  CHECK(e == "spec.toml:12:1: grid.seed: makes the grid more than 100000 points (150001 values here); split the "
             "study or shorten an axis");
  // The product of axes, at the axis that crosses the limit.
  e = error_of(base + "recipe = [\"bf16\", \"ufp4\", \"e2m1\"]\n" + seeds(40000, "20000"));
  CHECK(e.rfind("spec.toml:13:1: grid.seed: makes the grid more than 100000 points (40000 values here × 3 before)", 0) ==
        0);
}

TEST_CASE("sweep spec: a repeated axis value is found among many (the check is n log n)", "[sweeps][sweeps_spec]") {
  std::string axis = "seed = [";
  for (int i = 0; i < 90000; ++i) axis += std::to_string(i) + ", ";
  axis += "77]\n";
  const std::string e = error_of(kPrelude + "tokens = 65536\n[model]\npreset = \"d1\"\n[grid]\n" + axis);
  CHECK(e.rfind("spec.toml:12:", 0) == 0);
  CHECK(e.find("grid.seed: repeats the value 77 (first at 12:") != std::string::npos);
  // Numbers are compared as values: 1 and 1.0 are one learning rate.
  CHECK(error_of(kPrelude + "tokens = 65536\n[model]\npreset = \"d1\"\n[grid]\n\"train.lr\" = [1, 2, 1.0]\n")
            .find("repeats the value 1") != std::string::npos);
}

TEST_CASE("sweep spec: a toml++ error never escapes as anything but one located line", "[sweeps][sweeps_spec]") {
  const std::string message = error_of("[sweep]\nname = \"t\"\nname = \"u\"\n");
  CHECK(message.rfind("spec.toml:3:", 0) == 0);
  CHECK(message.find("malformed TOML") != std::string::npos);
  CHECK(error_of("[sweep]\nname = 99999999999999999999\n").rfind("spec.toml:2:", 0) == 0);
}

TEST_CASE("sweep spec: key order and number spelling do not change a run's id", "[sweeps][sweeps_spec]") {
  const std::string reference = only_id(one_point_spec("lr = 0.001\nseed = 3\n"));
  // The same point, written every other way the spec allows.
  CHECK(only_id(one_point_spec("seed = 3\nlr = 1e-3\n")) == reference);
  CHECK(only_id(one_point_spec("lr = 1.0e-3\n", "seed = [3]\n")) == reference);
  CHECK(only_id(one_point_spec("lr = 0.001\nseed = 3\nsteps = 16\n")) == reference);  // tokens = steps · batch
  CHECK(only_id(one_point_spec("lr = 0.001\nseed = 3\n", "\"train.lr\" = [0.001]\n")) == reference);
  CHECK(only_id(one_point_spec("lr = 0.001\n", "train.seed = [3]\n")) == reference);
  CHECK(only_id(one_point_spec("lr = 0.001\nseed = 3\n", "", "n_layers = 2\nd_model = 128\npreset = \"d2\"\n")) ==
        reference);
  // The defaults written out change nothing either.
  CHECK(only_id(one_point_spec("lr = 0.001\nseed = 3\nbeta1 = 0.9\nschedule = \"cosine\"\n", "recipe = [\"bf16\"]\n")) ==
        reference);

  // Token counts: an integer with separators, a float, a suffixed string.
  const std::string tokens_ref = only_id(one_point_spec("", "tokens = [25_000_000]\n"));
  CHECK(only_id(one_point_spec("", "tokens = [2.5e7]\n")) == tokens_ref);
  CHECK(only_id(one_point_spec("", "tokens = [\"25M\"]\n")) == tokens_ref);
  CHECK(only_id(one_point_spec("", "tokens = [\"25000k\"]\n")) == tokens_ref);

  // The synthetic source's parameters in another order are the same source.
  CHECK(only_id(one_point_spec("", "", "preset = \"d2\"\n", "synthetic:markov?vocab=64&order=1")) ==
        only_id(one_point_spec()));

  // Labels are not identity: the sweep's name, a custom recipe's name, sections in another order.
  const std::string a = R"([sweep]
name = "a"
[data]
source = "synthetic:markov?order=1&vocab=64"
[model]
preset = "d2"
[train]
tokens = 65536
batch_tokens = 4096
micro_batch = 4
[recipes.no-sr]
base = "ufp4"
sr = []
[grid]
recipe = ["no-sr"]
)";
  const std::string b = R"([recipes.ufp4-without-sr]
sr = []
base = "ufp4"
[grid]
recipe = ["ufp4-without-sr"]
[train]
micro_batch = 4
batch_tokens = 4096
tokens = 65536.0
[model]
preset = "d2"
[data]
source = "synthetic:markov?order=1&vocab=64"
[sweep]
name = "b"
store = "elsewhere.db"
)";
  CHECK(only_id(a) == only_id(b));
}

TEST_CASE("sweep spec: every semantic field changes a run's id", "[sweeps][sweeps_spec]") {
  const std::string reference = only_id(one_point_spec());
  const std::vector<std::pair<const char*, std::string>> variants = {
      {"lr", one_point_spec("lr = 0.002\n")},
      {"seed", one_point_spec("seed = 1\n")},
      {"tokens", one_point_spec("", "tokens = [131072]\n")},
      {"model dim", one_point_spec("", "", "preset = \"d2\"\nd_ff = 384\n")},
      {"model preset", one_point_spec("", "", "preset = \"d3\"\n")},
      {"data", one_point_spec("", "", "preset = \"d2\"\n", "synthetic:markov?order=2&vocab=64")},
      {"data directory", one_point_spec("", "", "preset = \"d2\"\n", "data/prose")},
      {"recipe", one_point_spec("", "recipe = [\"ufp4\"]\n")},
      {"schedule", one_point_spec("schedule = \"wsd\"\n")},
      {"eval", one_point_spec() + "[eval]\nevery = 7\n"},
  };
  std::set<std::string> seen = {reference};
  for (const auto& [what, text] : variants) {
    INFO(what);
    const std::string id = only_id(text);
    CHECK(id != reference);
    CHECK(seen.insert(id).second);
  }

  // A recipe override changes the id; the same override spelled as the preset does not exist twice.
  const std::string ufp4 = only_id(one_point_spec("", "recipe = [\"ufp4\"]\n"));
  const std::string overridden = only_id(one_point_spec("", "recipe = [\"mine\"]\n") +
                                         "[recipes.mine]\nbase = \"ufp4\"\n[recipes.mine.slots.wgrad_x]\nsr = true\n");
  CHECK(overridden != ufp4);
  const std::string renamed_preset = only_id(one_point_spec("", "recipe = [\"mine\"]\n") + "[recipes.mine]\nbase = \"ufp4\"\n");
  CHECK(renamed_preset == ufp4);
}

TEST_CASE("sweep spec: the same point in two grids is one run, adding values adds runs only", "[sweeps][sweeps_spec]") {
  const SweepSpec small = parse(one_point_spec("", "recipe = [\"bf16\", \"ufp4\"]\nseed = [0]\n"));
  const SweepSpec larger = parse(one_point_spec("", "seed = [0, 1]\nrecipe = [\"e2m1\", \"bf16\", \"ufp4\"]\n"));
  REQUIRE(small.points.size() == 2);
  REQUIRE(larger.points.size() == 6);
  const std::set<std::string> larger_ids = ids_of(larger);
  for (const GridPoint& p : small.points) {
    CHECK(larger_ids.count(p.id) == 1);
    CHECK(point_named(larger, p.name).id == p.id);  // same point, same name
  }
}

TEST_CASE("sweep spec: a point declared twice in one grid is kept once", "[sweeps][sweeps_spec]") {
  const SweepSpec s = parse(one_point_spec("", "recipe = [\"ufp4\", \"same-as-ufp4\", \"bf16\"]\n") +
                            "[recipes.same-as-ufp4]\nbase = \"ufp4\"\n");
  REQUIRE(s.points.size() == 2);
  CHECK(s.points[0].recipe_label == "ufp4");  // the first occurrence wins
  CHECK(s.points[1].recipe_label == "bf16");
}

TEST_CASE("sweep spec: no grid, or an empty one, is one point", "[sweeps][sweeps_spec]") {
  const SweepSpec empty = parse(one_point_spec());
  const SweepSpec none = parse(one_point_spec().substr(0, one_point_spec().find("[grid]")));
  CHECK(empty.axis_names.empty());
  CHECK(none.axis_names.empty());
  CHECK(only_point(empty).id == only_point(none).id);
  CHECK(only_point(none).name == "d2-65.5k-bf16-s0");
  CHECK(fp4::store::fit_table_json(none.fit) == json::object());
  CHECK(none.executor.order == "largest");
  CHECK(none.store == "/study/one.db");
  CHECK(none.run_root == "/study/runs");
}

TEST_CASE("sweep spec: tokens_per_param sets each point's tokens from its own model", "[sweeps][sweeps_spec]") {
  const std::string text = R"([sweep]
name = "tpp"
[data]
source = "synthetic:markov?order=1&vocab=64"
[train]
batch_tokens = 4096
micro_batch = 4
[grid]
model = ["d2", "d3"]
tokens_per_param = [20, 0.5]
)";
  const SweepSpec s = parse(text);
  REQUIRE(s.points.size() == 4);
  for (const GridPoint& p : s.points) {
    const double tpp = std::stod(p.axes.at("tokens_per_param"));
    const int64_t wanted = static_cast<int64_t>(std::ceil(tpp * static_cast<double>(p.n_params_nonembedding)));
    INFO(p.name);
    CHECK(p.tokens >= wanted);
    CHECK(p.tokens - wanted < 4096);  // rounded up to whole steps, no more
    CHECK(p.tokens % 4096 == 0);
  }
  // The vocabulary of the synthetic source (64) counts into the total, not into N.
  fp4::model::ModelShape d2 = fp4::model::model_preset("d2", 64);
  CHECK(s.points[0].n_params == fp4::model::total_params(d2));
  CHECK(s.points[0].n_params_nonembedding == fp4::model::nonembedding_params(d2));
}

TEST_CASE("sweep spec: run names", "[sweeps][sweeps_spec]") {
  const SweepSpec s = parse(one_point_spec("", "recipe = [\"ufp4\"]\n\"train.lr\" = [3e-3]\neval.every = [10]\nprobe.every = [5]\n"));
  // Axes the base name does not show are appended; two axes ending in "every" keep their full path.
  CHECK(only_point(s).name == "d2-65.5k-ufp4-s0-lr0.003-eval.every10-probe.every5");

  // A model axis over d_ff: two points share every shown value, so both get their id's first 8 digits.
  const SweepSpec clash = parse(one_point_spec(
      "", "model = [{n_layers = 2, d_model = 128, d_ff = 384}, {n_layers = 2, d_model = 128, d_ff = 448}]\n", ""));
  REQUIRE(clash.points.size() == 2);
  for (const GridPoint& p : clash.points) CHECK(p.name == "L2-d128-65.5k-bf16-s0-" + p.id.substr(0, 8));
}

TEST_CASE("sweep spec: compact counts", "[sweeps][sweeps_spec]") {
  CHECK(compact_count(25000000) == "25M");
  CHECK(compact_count(1500000000) == "1.5B");
  CHECK(compact_count(262144) == "262k");
  CHECK(compact_count(999) == "999");
  CHECK(compact_count(0) == "0");
  CHECK(compact_count(1000) == "1k");
  CHECK(compact_count(25034752) == "25M");
  CHECK(compact_count(1234567) == "1.23M");
  CHECK(compact_count(999999) == "1M");
  CHECK(compact_count(100000000000) == "100B");
  CHECK(compact_count(2000000000000) == "2T");
}

TEST_CASE("sweep spec: every run config field can be written in TOML", "[sweeps][sweeps_spec]") {
  // A resolved config with every field (wsd adds decay_fraction, a shard directory data_seed),
  // written back as TOML sections: if the engine gains a field the spec does not know, this fails.
  for (const char* data : {"synthetic:markov?order=1&vocab=64", "data/shards"}) {
    const fp4::run::RunConfig resolved = fp4::run::config_from_json(
        json::parse(std::string(R"({"model": {"preset": "d2"}, "data": ")") + data + R"(",
                        "train": {"tokens": 65536, "batch_tokens": 4096, "micro_batch": 4, "schedule": "wsd"}})"),
        "x");
    const json full = fp4::run::config_to_json(resolved);
    std::string text = "[sweep]\nname = \"all\"\n[data]\nsource = " + full.at("data").dump() + "\n";
    for (const char* section : {"model", "train", "eval", "probe", "checkpoint"}) {
      text += std::string("[") + section + "]\n";
      for (const auto& [key, value] : full.at(section).items()) text += key + " = " + value.dump() + "\n";
    }
    INFO(text);
    CHECK(only_point(parse(text)).config == full);
  }
  // An MoE model's [model.moe] too.
  const json full = fp4::run::config_to_json(fp4::run::config_from_json(
      json::parse(R"({"model": {"preset": "d2-e4k2"}, "data": "synthetic:markov?order=1&vocab=64",
                      "train": {"tokens": 65536, "batch_tokens": 4096, "micro_batch": 4}})"),
      "x"));
  std::string text = "[sweep]\nname = \"moe\"\n[data]\nsource = " + full.at("data").dump() + "\n";
  for (const char* section : {"model", "train", "eval", "probe", "checkpoint"}) {
    text += std::string("[") + section + "]\n";
    for (const auto& [key, value] : full.at(section).items())
      if (!value.is_object()) text += key + " = " + value.dump() + "\n";
  }
  text += "[model.moe]\n";
  for (const auto& [key, value] : full.at("model").at("moe").items()) text += key + " = " + value.dump() + "\n";
  INFO(text);
  CHECK(only_point(parse(text)).config == full);
}

TEST_CASE("sweep spec: load_sweep_spec reads the file and resolves paths against its directory", "[sweeps][sweeps_spec]") {
  fp4::test::ScratchDir dir;
  const std::string text = one_point_spec() + "";
  fp4::test::spit(dir / "grid.toml", text);
  const SweepSpec s = fp4::sweeps::load_sweep_spec(dir / "grid.toml");
  CHECK(s.base_dir == dir.path());
  CHECK(s.store == dir.path() / "one.db");
  CHECK(s.text == text);

  try {
    fp4::sweeps::load_sweep_spec(dir / "missing.toml");
    FAIL("no error for a missing file");
  } catch (const fp4::UserError& e) {
    CHECK(std::string(e.what()).find("missing.toml") != std::string::npos);
  }
}

TEST_CASE("sweep spec: the studies shipped in the repository parse", "[sweeps][sweeps_spec]") {
  const std::filesystem::path src = FP4LAB_SOURCE_DIR;
  CHECK(fp4::sweeps::load_sweep_spec(src / "scripts/demo-study.toml").points.size() == 36);
  const auto study = src / "results/first-study/study.toml";
  const auto noise = src / "results/first-study/noise-floor.toml";
  // Every build reads them, with or without CUDA: planning, reporting and fitting a study trained on
  // GPUs needs no GPU (only `sweep run` and `train` refuse device "cuda" in a build without CUDA).
  const auto s = fp4::sweeps::load_sweep_spec(study);
  CHECK(s.points.size() == 60);
  const auto n = fp4::sweeps::load_sweep_spec(noise);
  CHECK(n.points.size() == 36);
  // The noise floor's seed-0 runs are the study's own: one run each, in one store.
  CHECK(n.store == s.store);
  int shared = 0;
  for (const auto& p : n.points)
    for (const auto& q : s.points) shared += p.id == q.id;
  CHECK(shared == 12);
  // The ablations and the probes: their own points, in the same store.
  const auto a = fp4::sweeps::load_sweep_spec(src / "results/first-study/ablation.toml");
  CHECK(a.points.size() == 72);
  CHECK(a.store == s.store);
  int in_main = 0;
  for (const auto& x : a.points)
    for (const auto& q : s.points) in_main += x.id == q.id;
  CHECK(in_main == 3);  // d4-25M bf16, ufp4, e2m1 at seed 0
  const auto p = fp4::sweeps::load_sweep_spec(src / "results/first-study/probes.toml");
  CHECK(p.points.size() == 5);
  CHECK(p.store == s.store);
}

TEST_CASE("sweep spec: a linked axis gives each value of another axis its own value", "[sweeps][sweeps_spec]") {
  // Per-size learning rates: three sizes, three rates, two recipes: 6 points, not 18.
  for (const char* lr_key : {"\"train.lr\"", "train.lr"}) {
    const SweepSpec s = parse(kPrelude + "tokens = 65536\n[grid]\nmodel = [\"d1\", \"d2\", \"d3\"]\nrecipe = [\"bf16\", \"ufp4\"]\n" +
                              lr_key + " = {with = \"model\", values = [4e-3, 2e-3, 2e-3]}\n");
    REQUIRE(s.points.size() == 6);
    CHECK(s.axis_names == std::vector<std::string>{"model", "recipe", "train.lr"});
    for (const GridPoint& p : s.points) {
      INFO(p.name);
      const double lr = p.config["train"]["lr"].get<double>();
      CHECK(lr == (p.model_label == "d1" ? 4e-3 : 2e-3));
      CHECK(p.axes.at("train.lr") == (p.model_label == "d1" ? "0.004" : "0.002"));
    }
    // Grid order is that of the axes of their own; names show the linked value like any axis.
    CHECK(s.points[0].name == "d1-65.5k-bf16-s0-lr0.004");
    CHECK(s.points[1].name == "d1-65.5k-ufp4-s0-lr0.004");
    CHECK(s.points[5].name == "d3-65.5k-ufp4-s0-lr0.002");
    // The same point written with a plain axis is the same run.
    const SweepSpec plain = parse(kPrelude + "tokens = 65536\n[grid]\nmodel = [\"d2\"]\nrecipe = [\"ufp4\"]\n\"train.lr\" = [2e-3]\n");
    CHECK(point_named(s, "d2-65.5k-ufp4-s0-lr0.002").id == only_point(plain).id);
  }

  // Mistakes, each at its place.
  const std::string grid = kPrelude + "tokens = 65536\n[grid]\nmodel = [\"d1\", \"d2\"]\n";  // [grid] is line 9
  CHECK(error_of(grid + "\"train.lr\" = {with = \"model\", values = [1e-3]}\n") ==
        "spec.toml:11:40: grid.train.lr.values: has 1 values but grid.model has 2: give one per value of it, in its order");
  CHECK_THAT(error_of(grid + "\"train.lr\" = {with = \"models\", values = [1e-3, 2e-3]}\n"),
             Catch::StartsWith("spec.toml:11:22: grid.train.lr.with: names no axis of [grid] (\"models\")") &&
                 Catch::Contains("model, train.lr"));
  CHECK_THAT(error_of(grid + "\"train.lr\" = {with = \"train.lr\", values = [1e-3, 2e-3]}\n"),
             Catch::Contains("grid.train.lr.with: an axis cannot be linked with itself"));
  CHECK_THAT(error_of(grid + "\"train.lr\" = {with = \"model\", values = [1e-3, 2e-3]}\n"
                             "\"train.min_lr\" = {with = \"train.lr\", values = [1e-4, 2e-4]}\n"),
             Catch::Contains("grid.train.min_lr.with: names grid.train.lr, which is linked itself; link both with grid.model"));
  CHECK_THAT(error_of(grid + "\"train.lr\" = {with = \"model\"}\n"), Catch::Contains("grid.train.lr: a linked axis needs values"));
  CHECK_THAT(error_of(grid + "\"train.lr\" = {with = \"model\", values = [1e-3, 2e-3], extra = 1}\n"),
             Catch::Contains("grid.train.lr.extra"));
  CHECK_THAT(error_of(grid + "\"train.lr\" = {with = \"model\", values = [1e-3, \"fast\"]}\n"),
             Catch::Contains("grid.train.lr: must be a number"));
}

TEST_CASE("sweep status names a model written as a table by its label, as the run names do", "[sweeps][sweeps_spec]") {
  fp4::test::ScratchDir dir;
  const auto toml = dir / "labels.toml";
  fp4::test::spit(toml,
                  "[sweep]\nname = \"labels\"\n[data]\nsource = \"synthetic:markov?order=1&vocab=64\"\n"
                  "[model]\nseq_len = 32\n[train]\ntokens = 256\nbatch_tokens = 128\nmicro_batch = 2\n"
                  "[grid]\nmodel = [\"d1\", {n_layers = 1, d_model = 16, n_heads = 1, head_dim = 16}]\n");
  const auto status = fp4::test::run_fp4lab("sweep status '" + toml.string() + "'", dir);
  INFO(status.err);
  REQUIRE(status.exit_code == 0);
  CHECK(status.out.find("by model:\n  d1               new 1\n  L1-d16           new 1\n") != std::string::npos);
  CHECK(status.out.find("d_model") == std::string::npos);
}

TEST_CASE("sweep spec: [model.moe] and its dotted fields as axes", "[sweeps][sweeps_spec][moe]") {
  const std::string base = kPrelude + "tokens = 65536\n[model]\npreset = \"d2\"\n";
  // The section: every field, as the run config reads it.
  const SweepSpec one = parse(base + "[model.moe]\nexperts = 4\ntop_k = 2\nshared = 1\nscore = \"sigmoid\"\n"
                                     "renormalize = false\nbalance_coef = 0.02\nz_coef = 0\n");
  const GridPoint& p = only_point(one);
  const json moe = p.config.at("model").at("moe");
  CHECK(moe.at("experts") == 4);
  CHECK(moe.at("top_k") == 2);
  CHECK(moe.at("d_ff_expert") == 160);
  CHECK(moe.at("shared") == 1);
  CHECK(moe.at("score") == "sigmoid");
  CHECK(moe.at("renormalize") == false);
  CHECK(moe.at("balance_coef") == 0.02);
  CHECK(p.n_params_active_nonembedding < p.n_params_nonembedding);
  CHECK(p.model_label == "L2-d128-e4k2");

  // A dotted axis inside it: one point per top_k, each with its own width.
  const SweepSpec s = parse(base + "[model.moe]\nexperts = 8\ntop_k = 1\n[grid]\n\"model.moe.top_k\" = [1, 2]\n");
  REQUIRE(s.points.size() == 2);
  std::set<int> widths;
  for (const GridPoint& q : s.points) widths.insert(q.config.at("model").at("moe").at("d_ff_expert").get<int>());
  CHECK(widths == std::set<int>{320, 160});

  // Refusals, at the key.
  CHECK(error_of(base + "[model.moe]\nexperts = 4\ntop_k = 2\ncapacity = 1.25\n")
            .rfind("spec.toml:14:1: model.moe.capacity: is not a known key; [model.moe] has: ", 0) == 0);
  CHECK(error_of(base + "[model.moe]\nexperts = 4\ntop_k = 2\nrenormalize = 1\n") ==
        "spec.toml:14:15: model.moe.renormalize: must be true or false, got the integer 1");
  CHECK(error_of(base + "[model.moe]\nexperts = 4\ntop_k = 5\n").find("model.moe.top_k must be between 1 and") !=
        std::string::npos);
}

TEST_CASE("sweep spec: train.data_seed as a grid axis expands to distinct points, one data order each",
          "[sweeps][sweeps_spec]") {
  // A study that splits initial-weight noise from data-order noise (issue 32, 3): seeds × data
  // orders. The data order applies to a shuffled corpus only: shuffle = "sequences".
  const std::string grid = "recipe = [\"bf16\", \"ufp4\"]\nseed = [0, 1]\ntrain.data_seed = [7, 8]\n";
  const SweepSpec s =
      parse_sweep_spec(one_point_spec("shuffle = \"sequences\"\n", grid, "preset = \"d2\"\n", "data/prose"), "orders.toml", "/abs");
  CHECK(s.axis_names == std::vector<std::string>{"recipe", "seed", "train.data_seed"});
  REQUIRE(s.points.size() == 2 * 2 * 2);
  std::set<std::string> ids, names;
  for (const GridPoint& p : s.points) {
    INFO(p.name);
    ids.insert(p.id);
    names.insert(p.name);
    CHECK(p.config.at("train").at("shuffle") == "sequences");
    CHECK(std::to_string(p.config.at("train").at("data_seed").get<uint64_t>()) == p.axes.at("train.data_seed"));
    CHECK(p.config.at("train").at("seed").get<uint64_t>() == p.seed);
  }
  CHECK(ids.size() == 8);    // every (recipe, seed, data order) is a run of its own
  CHECK(names.size() == 8);
  // The contrasts' grouping (fit/contrasts.h): one data order under two initial-weight seeds is one
  // grid point, its recipes paired by seed; the other data order is another point.
  std::map<std::string, std::set<std::string>> orders_of_point;
  std::map<std::string, std::set<uint64_t>> seeds_of_replicate;
  for (const GridPoint& p : s.points) {
    orders_of_point[fp4::fit::comparison_key(p.config)].insert(p.axes.at("train.data_seed"));
    seeds_of_replicate[fp4::fit::replicate_key(p.config)].insert(p.seed);
  }
  REQUIRE(orders_of_point.size() == 2);
  for (const auto& [key, orders] : orders_of_point) CHECK(orders.size() == 1);
  CHECK(seeds_of_replicate.size() == 4);  // 2 recipes × 2 data orders, each over seeds 0 and 1
  for (const auto& [key, seeds] : seeds_of_replicate) CHECK(seeds == std::set<uint64_t>{0, 1});

  // Without the shuffle (as a synthetic source reads its stream) a data order means nothing: refused.
  CHECK_THROWS_WITH(parse_sweep_spec(one_point_spec("shuffle = \"none\"\n", grid, "preset = \"d2\"\n", "data/prose"),
                                     "orders.toml", "/abs"),
                    Catch::Contains("train.data_seed"));
}
