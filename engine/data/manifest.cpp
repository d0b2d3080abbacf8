// manifest.cpp — manifest.json to and from the Manifest struct, with one-line errors.
#include "engine/data/manifest.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/strict_json.h"
#include "base/user_error.h"

namespace fp4::data {
namespace {

using nlohmann::json;

json split_to_json(const SplitSummary& s) {
  json shards = json::array();
  for (const ShardEntry& e : s.shards) shards.push_back({{"file", e.file}, {"tokens", e.tokens}, {"sha256", e.sha256}});
  return {{"shards", shards}, {"tokens", s.tokens}, {"documents", s.documents}, {"document_bytes", s.document_bytes}};
}

// Field access that turns nlohmann's type errors into a message naming the file and the key.
struct Reader {
  const std::string& where;

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    throw UserError(where + ": " + key + " " + what +
                    "; the manifest is damaged or from another tool: rebuild the directory with "
                    "`fp4lab data build`");
  }
  const json& field(const json& obj, const std::string& key, const std::string& path) const {
    if (!obj.is_object() || !obj.contains(key)) bad(path + key, "is missing");
    return obj.at(key);
  }
  uint64_t u64(const json& obj, const std::string& key, const std::string& path = "") const {
    const json& v = field(obj, key, path);
    if (!v.is_number_unsigned()) bad(path + key, "is not a non-negative integer");
    return v.get<uint64_t>();
  }
  std::string str(const json& obj, const std::string& key, const std::string& path = "") const {
    const json& v = field(obj, key, path);
    if (!v.is_string()) bad(path + key, "is not a string");
    return v.get<std::string>();
  }
  SplitSummary split(const json& obj, const std::string& key) const {
    const json& s = field(obj, key, "");
    SplitSummary out;
    out.tokens = u64(s, "tokens", key + ".");
    out.documents = u64(s, "documents", key + ".");
    out.document_bytes = u64(s, "document_bytes", key + ".");
    const json& shards = field(s, "shards", key + ".");
    if (!shards.is_array()) bad(key + ".shards", "is not a list");
    uint64_t sum = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      std::string p = key + ".shards[" + std::to_string(i) + "].";
      ShardEntry e{str(shards[i], "file", p), u64(shards[i], "tokens", p), str(shards[i], "sha256", p)};
      // A file name, never a path: the manifest must not point outside its directory.
      if (e.file.empty() || e.file.find('/') != std::string::npos || e.file == "." || e.file == "..")
        bad(p + "file", "is not a plain file name");
      sum += e.tokens;
      out.shards.push_back(std::move(e));
    }
    if (sum != out.tokens) bad(key + ".tokens", "differs from the sum of its shards' tokens");
    return out;
  }
};

}  // namespace

std::string split_rule_text(uint64_t every) {
  return "number the documents of each input file 1, 2, 3, ... in file order; document n is validation if n % " +
         std::to_string(every) + " == 0, training otherwise";
}

json Manifest::to_json() const {
  json inputs_json = json::array();
  for (const InputEntry& in : inputs) {
    inputs_json.push_back({{"name", in.name},
                           {"sha256", in.sha256},
                           {"bytes", in.bytes},
                           {"text_sha256", in.text_sha256},
                           {"text_bytes", in.text_bytes},
                           {"documents", in.documents},
                           {"validation_documents", in.validation_documents},
                           {"validation_document_bytes", in.validation_document_bytes}});
  }
  return {{"format", "fp4lab-token-shards"},
          {"format_version", kManifestFormatVersion},
          {"tokenizer", tokenizer},
          {"vocab_size", vocab_size},
          {"document_separator", separator},
          {"document_separator_use",
           "every document is followed by the separator bytes in the token stream, the last one included"},
          {"split", {{"every", validation_every}, {"rule", split_rule_text(validation_every)}}},
          {"shard_tokens", shard_tokens},
          {"inputs", inputs_json},
          {"train", split_to_json(train)},
          {"validation", split_to_json(validation)}};
}

Manifest Manifest::from_json(const json& j, const std::string& where) {
  Reader r{where};
  if (!j.is_object()) r.bad("the top level", "is not a JSON object");
  if (r.str(j, "format") != "fp4lab-token-shards") r.bad("format", "is not \"fp4lab-token-shards\"");
  uint64_t version = r.u64(j, "format_version");
  if (version != static_cast<uint64_t>(kManifestFormatVersion))
    throw UserError(where + ": format_version " + std::to_string(version) + " is not supported (this fp4lab reads " +
                    std::to_string(kManifestFormatVersion) + "); rebuild with this fp4lab's `data build`");
  Manifest m;
  m.tokenizer = r.str(j, "tokenizer");
  uint64_t vocab = r.u64(j, "vocab_size");
  if (vocab == 0 || vocab > 65536) r.bad("vocab_size", "is outside 1..65536");
  m.vocab_size = static_cast<uint32_t>(vocab);
  m.separator = r.str(j, "document_separator");
  m.validation_every = r.u64(r.field(j, "split", ""), "every", "split.");
  if (m.validation_every == 0) r.bad("split.every", "is 0");
  m.shard_tokens = r.u64(j, "shard_tokens");
  const json& inputs = r.field(j, "inputs", "");
  if (!inputs.is_array()) r.bad("inputs", "is not a list");
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string p = "inputs[" + std::to_string(i) + "].";
    InputEntry in;
    in.name = r.str(inputs[i], "name", p);
    in.sha256 = r.str(inputs[i], "sha256", p);
    in.bytes = r.u64(inputs[i], "bytes", p);
    in.text_sha256 = r.str(inputs[i], "text_sha256", p);
    in.text_bytes = r.u64(inputs[i], "text_bytes", p);
    in.documents = r.u64(inputs[i], "documents", p);
    in.validation_documents = r.u64(inputs[i], "validation_documents", p);
    in.validation_document_bytes = r.u64(inputs[i], "validation_document_bytes", p);
    m.inputs.push_back(std::move(in));
  }
  m.train = r.split(j, "train");
  m.validation = r.split(j, "validation");
  return m;
}

std::string manifest_bytes(const Manifest& m) { return m.to_json().dump(2) + "\n"; }

Manifest read_manifest(const std::filesystem::path& dir, std::string* raw) {
  const std::filesystem::path path = dir / kManifestName;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
      throw UserError(dir.string() + ": not a directory; give a shard directory written by "
                      "`fp4lab data build` or a synthetic:NAME?... source");
    throw UserError(path.string() + ": missing: " + dir.string() +
                    " is not a finished shard directory; build it with `fp4lab data build ... --out " +
                    dir.string() + "`");
  }
  std::ostringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = parse_json_strictly(text.str(), path.string());
  } catch (const UserError& e) {
    throw UserError(std::string(e.what()) + ": the manifest is not valid JSON (damaged): rebuild the directory with "
                    "`fp4lab data build`");
  }
  Manifest m = Manifest::from_json(j, path.string());
  if (raw) *raw = text.str();
  return m;
}

}  // namespace fp4::data
