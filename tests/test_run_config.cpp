// test_run_config.cpp — the run config: resolution, the canonical form and its hash, and one clear
// line for every way a config can be wrong.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "engine/run/config.h"

using fp4::run::config_from_json;
using fp4::run::config_from_text;
using fp4::run::config_hash;
using fp4::run::config_to_json;
using fp4::run::RunConfig;
using nlohmann::json;

namespace {

json minimal() {
  return json::parse(R"({"model": {"preset": "d1", "seq_len": 64}, "data": "synthetic:markov?order=1&vocab=64",
                         "train": {"steps": 40, "batch_tokens": 512, "micro_batch": 4}})");
}

// The message the config throws, checked to be one line that starts with the file name.
std::string error_of_text(const std::string& text) {
  try {
    config_from_text(text, "run.json");
  } catch (const fp4::UserError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.rfind("run.json", 0) == 0);
    return what;
  }
  FAIL("no error for: " << text);
  return {};
}

std::string error_of(const json& j) { return error_of_text(j.dump()); }

json with(json j, const json::json_pointer& at, const json& value) {
  j[at] = value;
  return j;
}

}  // namespace

TEST_CASE("run config: defaults are resolved and written out", "[run][config]") {
  const RunConfig c = config_from_json(minimal(), "run.json");
  CHECK(c.model.n_layers == 1);
  CHECK(c.model.d_model == 64);
  CHECK(c.model.n_heads == 1);
  CHECK(c.model.head_dim == 64);
  CHECK(c.model.d_ff == 192);  // the multiple of 64 nearest 8/3 · 64 = 170.7
  CHECK(c.train.tokens == 40 * 512);
  CHECK(c.grad_accum() == 2);  // 512 / (4 · 64)
  CHECK(c.train.min_lr == Approx(c.train.lr / 10));
  CHECK(c.train.warmup_steps == 2);  // steps / 20
  CHECK(c.recipe.name == "bf16");
  const json j = config_to_json(c);
  for (const char* key : {"model", "recipe", "data", "train", "eval", "probe", "checkpoint", "device", "storage"})
    CHECK(j.contains(key));
  for (const char* key : {"seed", "tokens", "steps", "batch_tokens", "micro_batch", "lr", "min_lr", "warmup_steps",
                          "schedule", "beta1", "beta2", "eps", "weight_decay", "grad_clip", "shuffle"})
    CHECK(j["train"].contains(key));
}

TEST_CASE("run config: resolving a resolved config changes nothing", "[run][config]") {
  for (const char* recipe : {"bf16", "e2m1", "ufp4", "nvfp4", "mxfp4", "ufp4-e4m3"}) {
    json j = minimal();
    j["recipe"] = recipe;
    j["train"]["schedule"] = "wsd";
    const RunConfig a = config_from_json(j, "run.json");
    const json resolved = config_to_json(a);
    const RunConfig b = config_from_json(resolved, "config.json");
    CHECK(config_to_json(b) == resolved);
    CHECK(config_hash(a) == config_hash(b));
    CHECK(config_hash(a).size() == 64);
  }
}

TEST_CASE("run config: the hash changes with any field", "[run][config]") {
  const std::string base = config_hash(config_from_json(minimal(), "run.json"));
  CHECK(config_hash(config_from_json(with(minimal(), "/train/seed"_json_pointer, 1), "run.json")) != base);
  CHECK(config_hash(config_from_json(with(minimal(), "/train/lr"_json_pointer, 2e-3), "run.json")) != base);
  CHECK(config_hash(config_from_json(with(minimal(), "/recipe"_json_pointer, "ufp4"), "run.json")) != base);
  // Key order in the file and parameter order in a synthetic spec do not matter: both are canonicalized.
  const json j = minimal();
  std::string reordered = R"({"train": )" + j["train"].dump() + R"(, "data": "synthetic:markov?vocab=64&order=1", "model": )" +
                          j["model"].dump() + "}";
  CHECK(config_hash(config_from_text(reordered, "x.json")) == base);
}

TEST_CASE("run config: tokens round up to whole steps, and steps and tokens must agree", "[run][config]") {
  json j = minimal();
  j["train"].erase("steps");
  j["train"]["tokens"] = 1000;
  const RunConfig c = config_from_json(j, "run.json");
  CHECK(c.train.steps == 2);
  CHECK(c.train.tokens == 1024);
  j["train"]["tokens"] = 1e6;  // an integral float is an integer
  CHECK(config_from_json(j, "run.json").train.steps == 1954);
  j["train"]["steps"] = 3;
  CHECK(error_of(j) == "run.json: train.tokens (1000000) disagrees with train.steps × train.batch_tokens "
                       "(3 × 512 = 1536): give one of them");
}

TEST_CASE("run config: malformed JSON names line and column", "[run][config]") {
  const std::string e = error_of_text("{\n  \"model\": {\"preset\": \"d1\"},\n  \"data\": ,\n}");
  CHECK(e.rfind("run.json:3:11: malformed JSON:", 0) == 0);
  CHECK(error_of_text("").rfind("run.json:1:1: malformed JSON:", 0) == 0);
  CHECK(error_of_text("[1, 2]") == "run.json: the config must be a JSON object, got [1,2]");
}

TEST_CASE("run config: a key given twice is refused, naming the key and both places", "[run][config]") {
  // JSON allows it and nlohmann would keep the last value: this config would train with lr 5.
  const std::string text =
      "{\"model\": {\"preset\": \"d1\", \"seq_len\": 64}, \"data\": \"synthetic:markov\",\n"
      " \"train\": {\"steps\": 4, \"batch_tokens\": 512, \"micro_batch\": 4,\n"
      "           \"lr\": 0.001,\n"
      "           \"lr\": 5}}";
  CHECK(error_of_text(text) == "run.json:4:12: train.lr: is given twice (first at line 3, column 12); keep one");
  // At the top, inside a recipe object, and a key with an escaped quote in it.
  CHECK(error_of_text("{\"data\": \"a\", \"data\": \"b\"}") ==
        "run.json:1:15: data: is given twice (first at line 1, column 2); keep one");
  CHECK(error_of_text("{\"recipe\": {\"base\": \"ufp4\", \"sr\": [], \"sr\": [\"wgrad\"]}}")
            .rfind("run.json:1:39: recipe.sr: is given twice", 0) == 0);
  CHECK(error_of_text("{\"a\\\"b\": 1, \"a\\\"b\": 2}").rfind("run.json:1:13: a\"b: is given twice", 0) == 0);
  // Equal keys in different objects are different keys.
  json j = minimal();
  j["eval"] = {{"every", 10}};
  j["probe"] = {{"every", 10}};
  CHECK(config_from_text(j.dump(), "run.json").probe.every == 10);
}

TEST_CASE("run config: numbers a double cannot hold are refused, naming the field", "[run][config]") {
  const std::string text =
      "{\"model\": {\"preset\": \"d1\"}, \"data\": \"synthetic:markov\",\n"
      " \"train\": {\"steps\": 4, \"lr\": 1e400}}";
  CHECK(error_of_text(text) == "run.json:2:30: train.lr: number overflow parsing '1e400': the number is out of range");
  CHECK(error_of_text("{\"recipe\": {\"sr\": [-1e999]}}").rfind("run.json:1:", 0) == 0);
  // An integer beyond 64 bits reads as a float, which an integer field refuses as such.
  CHECK(error_of(with(minimal(), "/train/seed"_json_pointer, json::parse("123456789012345678901234567890")))
            .rfind("run.json: train.seed must be a non-negative integer, got 1.2345", 0) == 0);
}

TEST_CASE("run config: bf16_layers counts and indices beyond int are values, not exceptions", "[run][config]") {
  // "first:k" with k at least the model's blocks keeps every block in bf16, however large k is.
  json j = with(minimal(), "/recipe"_json_pointer, json{{"base", "ufp4"}, {"bf16_layers", {"first:99999999999"}}});
  CHECK(config_from_json(j, "run.json").recipe.bf16_layers == std::vector<std::string>{"first:99999999999"});
  const std::string e =
      error_of(with(minimal(), "/recipe"_json_pointer, json{{"base", "ufp4"}, {"bf16_layers", {"99999999999"}}}));
  CHECK(e.find("bf16_layers entry 99999999999 is out of range: the model has 1 blocks") != std::string::npos);
}

TEST_CASE("run config: a recipe's block, clip and bf16_layers numbers are checked, never converted out of range",
          "[run][config]") {
  // Found by the run_config fuzzer (tests/fuzz/run_config/crashes/): a slot's block of 1.8e21 was
  // cast to int (undefined behaviour), a block of 16.5 became 16, a clip beyond float's range was
  // converted, and a bf16_layers integer was cut to int (2^32 kept block 0 in bf16).
  const auto recipe_error = [](const json& recipe) {
    return error_of(with(minimal(), "/recipe"_json_pointer, recipe));
  };
  CHECK(recipe_error(json{{"base", "nvfp4"}, {"slots", {{"fprop_w", {{"block", json::parse("1844674407370955161616")}}}}}})
            .rfind("run.json: recipe: recipe nvfp4 slot fprop_w: block must be 16 or 32, got 1.8446744073709552e+21", 0) == 0);
  CHECK(recipe_error(json{{"base", "ufp4"}, {"block", 16.5}})
            .find("block must be 16 or 32, got 16.5") != std::string::npos);
  CHECK(recipe_error(json{{"base", "ufp4"}, {"block", -2147483648.0}})
            .find("block must be 16 or 32") != std::string::npos);
  CHECK(recipe_error(json{{"base", "ufp4"}, {"clip", 1e300}}).find("clip is out of range, got 1e+300") !=
        std::string::npos);
  CHECK(recipe_error(json{{"base", "ufp4"}, {"bf16_layers", {4294967296LL}}})
            .find("bf16_layers entry 4294967296 is out of range") != std::string::npos);
  CHECK(recipe_error(json{{"base", "ufp4"}, {"bf16_layers", {json::parse("18446744073709551615")}}})
            .find("bf16_layers entry 18446744073709551615 is out of range") != std::string::npos);
  // The same values in range still work.
  json ok = with(minimal(), "/recipe"_json_pointer, json{{"base", "mxfp4"}, {"block", 32.0}, {"bf16_layers", {0}}});
  CHECK_NOTHROW(config_from_json(ok, "run.json"));
}

TEST_CASE("run config: unknown keys are refused, naming the key", "[run][config]") {
  json j = minimal();
  j["trian"] = json::object();
  CHECK(error_of(j).rfind("run.json: trian is not a known key (the config has: checkpoint, data,", 0) == 0);
  CHECK(error_of(with(minimal(), "/train/learning_rate"_json_pointer, 1))
            .rfind("run.json: train.learning_rate is not a known key (train has: ", 0) == 0);
  CHECK(error_of(with(minimal(), "/model/layers"_json_pointer, 1)).rfind("run.json: model.layers is not a known key", 0) == 0);
  CHECK(error_of(with(minimal(), "/eval/evry"_json_pointer, 1)).rfind("run.json: eval.evry is not a known key", 0) == 0);
  CHECK(error_of(with(minimal(), "/recipe"_json_pointer, json{{"base", "ufp4"}, {"gird", "e2m1"}}))
            .find("unknown field \"gird\"") != std::string::npos);
}

TEST_CASE("run config: wrong types are refused, naming the field", "[run][config]") {
  CHECK(error_of(with(minimal(), "/train/lr"_json_pointer, "fast")) == "run.json: train.lr must be a number, got \"fast\"");
  CHECK(error_of(with(minimal(), "/train/steps"_json_pointer, 1.5)) == "run.json: train.steps must be an integer, got 1.5");
  CHECK(error_of(with(minimal(), "/train/seed"_json_pointer, -3)) == "run.json: train.seed must be >= 0, got -3");
  CHECK(error_of(with(minimal(), "/train/schedule"_json_pointer, 1)) == "run.json: train.schedule must be a string, got 1");
  CHECK(error_of(with(minimal(), "/model/preset"_json_pointer, 2)) == "run.json: model.preset must be a string, got 2");
  CHECK(error_of(with(minimal(), "/train"_json_pointer, 5)) == "run.json: train must be an object, got 5");
  CHECK(error_of(with(minimal(), "/data"_json_pointer, json::array()))
            .rfind("run.json: data must be a non-empty string", 0) == 0);
  CHECK(error_of(with(minimal(), "/recipe"_json_pointer, 7)).rfind("run.json: recipe:", 0) == 0);
}

TEST_CASE("run config: bad values are refused, naming the field", "[run][config]") {
  CHECK(error_of(with(minimal(), "/train/lr"_json_pointer, -1)) == "run.json: train.lr must be > 0, got -1");
  CHECK(error_of(with(minimal(), "/train/min_lr"_json_pointer, 1)) ==
        "run.json: train.min_lr must be between 0 and train.lr (0.001), got 1");
  CHECK(error_of(with(minimal(), "/train/warmup_steps"_json_pointer, 41)) ==
        "run.json: train.warmup_steps must be between 0 and train.steps (40), got 41");
  CHECK(error_of(with(minimal(), "/train/beta2"_json_pointer, 1)) == "run.json: train.beta2 must be in [0, 1), got 1");
  CHECK(error_of(with(minimal(), "/train/eps"_json_pointer, 0)) == "run.json: train.eps must be > 0, got 0");
  CHECK(error_of(with(minimal(), "/train/grad_clip"_json_pointer, -1)).rfind("run.json: train.grad_clip must be >= 0", 0) == 0);
  CHECK(error_of(with(minimal(), "/train/steps"_json_pointer, 0)) == "run.json: train.steps must be > 0, got 0");
  CHECK(error_of(with(minimal(), "/train/schedule"_json_pointer, "linear")) ==
        "run.json: train.schedule must be \"cosine\" or \"wsd\", got \"linear\"");
  CHECK(error_of(with(minimal(), "/train/decay_fraction"_json_pointer, 0.2)) ==
        "run.json: train.decay_fraction applies only to train.schedule \"wsd\" (the schedule is \"cosine\")");
  json wsd = with(minimal(), "/train/schedule"_json_pointer, "wsd");
  CHECK(error_of(with(wsd, "/train/decay_fraction"_json_pointer, 1.5)) ==
        "run.json: train.decay_fraction must be in (0, 1], got 1.5");
  CHECK(error_of(with(minimal(), "/train/batch_tokens"_json_pointer, 600)) ==
        "run.json: train.batch_tokens (600) must be a multiple of train.micro_batch × model.seq_len (4 × 64 = 256), "
        "so that gradient accumulation is a whole number of micro-steps");
  CHECK(error_of(with(minimal(), "/model/preset"_json_pointer, "big")) ==
        "run.json: model.preset must be \"d<L>\" with L from 1 to 64 (e.g. \"d4\"), \"d<L>-e<E>k<K>\" (e.g. "
        "\"d4-e8k2\": 8 experts, top-2) or \"custom\", got \"big\"");
  CHECK(error_of(with(minimal(), "/model/head_dim"_json_pointer, 63)) ==
        "run.json: model.head_dim must be even (RoPE rotates pairs of features), got 63");
  CHECK(error_of(with(minimal(), "/model/n_heads"_json_pointer, 3)) ==
        "run.json: model.n_heads × model.head_dim must equal model.d_model (3 × 64 ≠ 64)");
  CHECK(error_of(json::parse(R"({"model": {"d_model": 64}, "data": "x", "train": {"steps": 1}})")) ==
        "run.json: model needs a preset (\"d<L>\", e.g. \"d2\") or both n_layers and d_model");
  CHECK(error_of(json::parse(R"({"data": "x", "train": {"steps": 1}})")).rfind("run.json: model is required", 0) == 0);
  CHECK(error_of(json::parse(R"({"model": {"preset": "d1"}, "train": {"steps": 1}})")).rfind("run.json: data is required", 0) == 0);
  CHECK(error_of(json::parse(R"({"model": {"preset": "d1"}, "data": "x", "train": {}})")) ==
        "run.json: train needs train.tokens (total training tokens) or train.steps");
  CHECK(error_of(with(minimal(), "/eval/tokens"_json_pointer, 100)) ==
        "run.json: eval.tokens (100) must be a multiple of model.seq_len (64): the held-out set is whole sequences");
  CHECK(error_of(with(minimal(), "/probe/every"_json_pointer, -1)) == "run.json: probe.every must be >= 0, got -1");
  json probe = with(minimal(), "/probe/every"_json_pointer, 10);
  CHECK(error_of(with(probe, "/eval/tokens"_json_pointer, 128)) ==
        "run.json: eval.tokens (128) must be at least train.micro_batch × model.seq_len (256) when the probe is on: "
        "it measures one micro-batch of the held-out set");
  CHECK(error_of(with(minimal(), "/device"_json_pointer, "tpu")) ==
        "run.json: device must be \"cpu\" or \"cuda\", got \"tpu\"");
  // Read in every build (a CPU-only build plans, fits and reports GPU studies); the trainer and
  // `sweep run` refuse it where CUDA is missing (tests/test_run_trainer.cpp, test_sweeps_run.cpp).
  CHECK(config_from_json(with(minimal(), "/device"_json_pointer, "cuda"), "run.json").device == "cuda");
  CHECK(fp4::run::device_name_error("cuda").empty());
  CHECK(fp4::run::device_name_error("tpu") == "device must be \"cpu\" or \"cuda\", got \"tpu\"");
#ifdef FP4LAB_HAVE_CUDA
  CHECK(fp4::run::device_error("cuda").empty());
#else
  CHECK(fp4::run::device_error("cuda").rfind("device \"cuda\": this fp4lab was built without CUDA; ", 0) == 0);
#endif
  CHECK(error_of(with(minimal(), "/storage"_json_pointer, "fp32")) == "run.json: storage must be \"bf16\", got \"fp32\"");
  CHECK(error_of(with(minimal(), "/recipe"_json_pointer, "fp3")).rfind("run.json: recipe: unknown recipe preset \"fp3\"", 0) == 0);
}

TEST_CASE("run config: a dimension that is not a multiple of the recipe's block is named", "[run][config]") {
  json j = minimal();
  j["recipe"] = "ufp4";
  j["model"]["d_ff"] = 200;
  CHECK(error_of(j) == "run.json: model.d_ff = 200 does not fit recipe \"ufp4\" (MLP output layer: input features (K) "
                       "= 200 is not a multiple of the block size 16 (slot fprop_x))");
  // mxfp4 blocks by 32: d_ff = 208 is a multiple of 16, not of 32.
  j["recipe"] = "mxfp4";
  j["model"]["d_ff"] = 208;
  CHECK(error_of(j).rfind("run.json: model.d_ff = 208 does not fit recipe \"mxfp4\"", 0) == 0);
  // The tokens of a micro-batch are wgrad's reduction dimension.
  j = minimal();
  j["recipe"] = "e2m1";
  j["model"]["seq_len"] = 60;
  j["train"]["micro_batch"] = 1;
  j["train"]["batch_tokens"] = 120;
  j["eval"]["tokens"] = 600;
  CHECK(error_of(j).rfind("run.json: train.micro_batch × model.seq_len (1 × 60 = 60) does not fit recipe \"e2m1\"", 0) == 0);
  // The same shape is fine in bf16, or when every block is kept in bf16.
  j["recipe"] = "bf16";
  CHECK_NOTHROW(config_from_json(j, "run.json"));
  j["recipe"] = json{{"base", "e2m1"}, {"bf16_layers", {"last:1"}}};
  CHECK_NOTHROW(config_from_json(j, "run.json"));
  j["recipe"] = json{{"base", "e2m1"}, {"bf16_layers", {5}}};
  CHECK(error_of(j).rfind("run.json: recipe.bf16_layers: bf16_layers entry 5 is out of range", 0) == 0);
}

TEST_CASE("run config: gpus is part of the identity only when it is not 1", "[run][config][gpus]") {
  const RunConfig plain = config_from_json(minimal(), "run.json");
  CHECK(plain.gpus == 1);
  CHECK_FALSE(config_to_json(plain).contains("gpus"));
  // Naming 1 is the default: the same canonical bytes, so the same run id as before the field.
  const RunConfig one = config_from_json(with(minimal(), "/gpus"_json_pointer, 1), "run.json");
  CHECK(fp4::run::config_canonical(one) == fp4::run::config_canonical(plain));
  json cuda = with(minimal(), "/device"_json_pointer, "cuda");
  const RunConfig two = config_from_json(with(cuda, "/gpus"_json_pointer, 2), "run.json");
  CHECK(two.gpus == 2);
  CHECK(config_to_json(two)["gpus"] == 2);
  CHECK(config_hash(two) != config_hash(config_from_json(cuda, "run.json")));
  CHECK(config_hash(config_from_json(config_to_json(two), "config.json")) == config_hash(two));
  // Without a device the trainer picks one; gpus > 1 is checked again once it has.
  CHECK(config_from_json(with(minimal(), "/gpus"_json_pointer, 2), "run.json").gpus == 2);
}

TEST_CASE("run config: gpus is refused in one line when it cannot work", "[run][config][gpus]") {
  json cuda = with(minimal(), "/device"_json_pointer, "cuda");  // 2 micro-steps per step
  CHECK_THAT(error_of(with(cuda, "/gpus"_json_pointer, 0)), Catch::Contains("gpus must be between 1 and"));
  CHECK_THAT(error_of(with(cuda, "/gpus"_json_pointer, -2)), Catch::Contains("gpus must be between 1 and"));
  CHECK_THAT(error_of(with(cuda, "/gpus"_json_pointer, 1.5)), Catch::Contains("gpus must be a whole number"));
  CHECK_THAT(error_of(with(cuda, "/gpus"_json_pointer, "2")), Catch::Contains("gpus must be a whole number"));
  const json cpu = with(with(minimal(), "/device"_json_pointer, "cpu"), "/gpus"_json_pointer, 2);
  CHECK_THAT(error_of(cpu), Catch::Contains("gpus = 2 needs device \"cuda\""));
  const std::string e = error_of(with(cuda, "/gpus"_json_pointer, 4));
  CHECK_THAT(e, Catch::Contains("gpus = 4 does not divide the 2 micro-steps"));
  CHECK_THAT(e, Catch::Contains("multiple of 1024"));  // 4 × 4 × 64
  RunConfig c = config_from_json(cuda, "run.json");
  CHECK_THROWS_WITH(fp4::run::set_gpus(c, 3, "--gpus"), Catch::StartsWith("--gpus: gpus = 3 does not divide"));
  fp4::run::set_gpus(c, 2, "--gpus");
  CHECK(c.gpus == 2);
}

TEST_CASE("run config: model.moe resolves from a preset or its own fields, and a dense config writes none",
          "[run][config][moe]") {
  // Dense: no "moe" key, so every dense run id made before MoE existed is unchanged.
  CHECK_FALSE(config_to_json(config_from_json(minimal(), "run.json"))["model"].contains("moe"));

  // The preset: 8 experts, top-2 at half the dense width (d2: d_ff 320 → 160), renormalized, the
  // default coefficients.
  const RunConfig p = config_from_json(with(minimal(), "/model/preset"_json_pointer, "d2-e8k2"), "run.json");
  CHECK(p.model.n_layers == 2);
  CHECK(p.model.d_model == 128);
  CHECK(p.model.moe.n_experts == 8);
  CHECK(p.model.moe.top_k == 2);
  CHECK(p.model.moe.d_ff_expert == 160);
  CHECK(p.model.moe.renormalize);
  CHECK(p.model.moe.every == 1);
  CHECK(p.model.moe.n_shared == 0);
  CHECK(p.model.moe.score == fp4::model::RouterScore::softmax);
  CHECK(p.model.moe.balance_coef == 0.01);
  CHECK(p.model.moe.z_coef == 0.001);
  const json written = config_to_json(p);
  CHECK(written["model"]["moe"] == json::parse(R"({"experts": 8, "top_k": 2, "d_ff_expert": 160, "shared": 0,
      "every": 1, "score": "softmax", "renormalize": true, "balance_coef": 0.01, "z_coef": 0.001})"));
  // Resolving the resolved form changes nothing, and any MoE field changes the hash.
  CHECK(config_hash(config_from_json(written, "run.json")) == config_hash(p));
  CHECK(config_hash(config_from_json(with(written, "/model/moe/z_coef"_json_pointer, 0.0), "run.json")) !=
        config_hash(p));

  // Fields on a dense preset: top-1 is not renormalized (Switch), the width follows top_k.
  json explicit_moe = with(minimal(), "/model/moe"_json_pointer,
                           json::parse(R"({"experts": 4, "top_k": 1, "score": "sigmoid", "shared": 1})"));
  const RunConfig e = config_from_json(explicit_moe, "run.json");
  CHECK(e.model.moe.n_experts == 4);
  CHECK(e.model.moe.d_ff_expert == 192);  // d1: d_ff 192, top-1
  CHECK_FALSE(e.model.moe.renormalize);
  CHECK(e.model.moe.score == fp4::model::RouterScore::sigmoid);
  CHECK(e.model.moe.n_shared == 1);
  // A preset's top_k overridden: the width is the rule's for the new k.
  const RunConfig k4 = config_from_json(
      with(with(minimal(), "/model/preset"_json_pointer, "d2-e8k2"), "/model/moe"_json_pointer, json{{"top_k", 4}}),
      "run.json");
  CHECK(k4.model.moe.d_ff_expert == 96);  // 320 / 4 = 80 → the nearest multiple of 32, a tie, goes up
}

TEST_CASE("run config: bad model.moe fields are refused in one line, naming the field", "[run][config][moe]") {
  const auto moe = [](const char* fields) {
    return with(minimal(), "/model/moe"_json_pointer, json::parse(fields));
  };
  CHECK(error_of(moe(R"({"experts": 4})")) ==
        "run.json: model.moe needs moe.experts and moe.top_k (or a preset \"d<L>-e<E>k<K>\")");
  CHECK(error_of(moe(R"({"experts": 0, "top_k": 1})")) == "run.json: model.moe.experts must be > 0, got 0");
  CHECK(error_of(moe(R"({"experts": 4, "top_k": 5})")) ==
        "run.json: model.moe.top_k must be between 1 and model.moe.experts (4), got 5");
  CHECK(error_of(moe(R"({"experts": 4, "top_k": 2, "every": 2})")) ==
        "run.json: model.moe.every must be between 1 and model.n_layers (1), got 2");
  CHECK(error_of(moe(R"({"experts": 4, "top_k": 2, "score": "relu"})")) ==
        "run.json: model.moe.score must be \"softmax\" or \"sigmoid\", got \"relu\"");
  CHECK(error_of(moe(R"({"experts": 4, "top_k": 2, "renormalize": 1})")) ==
        "run.json: model.moe.renormalize must be true or false, got 1");
  CHECK(error_of(moe(R"({"experts": 4, "top_k": 2, "balance_coef": -1})")) ==
        "run.json: model.moe.balance_coef must be a finite number >= 0, got -1");
  CHECK(error_of(moe(R"({"experts": 4, "top_k": 2, "shared": -1})")) ==
        "run.json: model.moe.shared must be >= 0, got -1");
  CHECK(error_of(moe(R"({"experts": 4, "top_k": 2, "capacity": 1.25})")).rfind(
            "run.json: model.moe.capacity is not a known key (model.moe has: ", 0) == 0);
  CHECK(error_of(with(minimal(), "/model/preset"_json_pointer, "d2-e8")) ==
        "run.json: model.preset must be \"d<L>\" with L from 1 to 64 (e.g. \"d4\"), \"d<L>-e<E>k<K>\" (e.g. "
        "\"d4-e8k2\": 8 experts, top-2) or \"custom\", got \"d2-e8\"");
  CHECK(error_of(with(minimal(), "/model/preset"_json_pointer, "d2-e2k3")).rfind("run.json: model.preset must be", 0) == 0);
  // The experts' dimensions against the recipe's blocks.
  json ufp4 = with(moe(R"({"experts": 4, "top_k": 2, "d_ff_expert": 40})"), "/recipe"_json_pointer, "ufp4");
  CHECK(error_of(ufp4) ==
        "run.json: model.moe.d_ff_expert = 40 does not fit recipe \"ufp4\" (MoE expert output layer: input features "
        "(K) = 40 is not a multiple of the block size 16 (slot fprop_x))");
  // The probe does not measure experts yet.
  CHECK(error_of(with(moe(R"({"experts": 4, "top_k": 2})"), "/probe/every"_json_pointer, 5)) ==
        "run.json: probe.every must be 0 for an MoE model: the shrinkage probe does not measure the experts' "
        "linears yet");
}
