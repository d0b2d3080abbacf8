// entry_points.cpp — see entry_points.h.
#include "tests/fuzz/entry_points.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "base/files.h"
#include "base/strict_json.h"
#include "base/user_error.h"
#include "engine/data/data_source.h"
#include "engine/data/manifest.h"
#include "engine/data/shard.h"
#include "quant/npy.h"
#include "engine/run/checkpoint.h"
#include "engine/run/config.h"
#include "sweeps/spec.h"

namespace fp4::fuzz {

namespace {

std::string text_of(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

// One scratch file per process for the readers that take a path (the shard reader maps files).
const std::filesystem::path& scratch_file() {
  static const std::filesystem::path path = [] {
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::exists("/dev/shm", ec) ? "/dev/shm" : std::filesystem::temp_directory_path();
    return dir / ("fp4lab-fuzz-" + std::to_string(::getpid()) + ".bin");
  }();
  return path;
}

}  // namespace

void sweep_spec(const uint8_t* data, size_t size) {
  try {
    // Relative paths resolve against a directory that does not exist: nothing on disk is read.
    (void)sweeps::parse_sweep_spec(text_of(data, size), "fuzz.toml", "/nonexistent/fp4lab-fuzz");
  } catch (const UserError&) {
  }
}

void run_config(const uint8_t* data, size_t size) {
  try {
    const run::RunConfig c = run::config_from_text(text_of(data, size), "fuzz.json");
    // Resolution is idempotent: the resolved form reads back to the same hash.
    if (run::config_hash(run::config_from_json(run::config_to_json(c), "fuzz.json")) != run::config_hash(c))
      throw std::logic_error("run_config: the resolved config does not read back to itself");
  } catch (const UserError&) {
  }
}

void shard(const uint8_t* data, size_t size) {
  const std::filesystem::path& path = scratch_file();
  write_file_atomic(path, {std::string_view(reinterpret_cast<const char*>(data), size)});
  try {
    data::ShardHeader header;
    const std::vector<uint16_t> tokens = data::read_shard(path, &header);
    if (tokens.size() != header.tokens) throw std::logic_error("shard: token count differs from the header");
    const data::MappedShard mapped(path);
    mapped.check_tokens();
  } catch (const UserError&) {
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

void manifest(const uint8_t* data, size_t size) {
  try {
    const nlohmann::json j = parse_json_strictly(text_of(data, size), "manifest.json");
    const data::Manifest m = data::Manifest::from_json(j, "manifest.json");
    // What was accepted is written back and read again unchanged.
    const data::Manifest again =
        data::Manifest::from_json(parse_json_strictly(data::manifest_bytes(m), "manifest.json"), "manifest.json");
    if (data::manifest_bytes(again) != data::manifest_bytes(m))
      throw std::logic_error("manifest: the accepted manifest does not round-trip");
  } catch (const UserError&) {
  }
}

void npy(const uint8_t* data, size_t size) {
  try {
    const npy::Array a = npy::parse("fuzz.npy", data, size);
    if (static_cast<size_t>(a.size()) * (a.dtype == npy::Dtype::float32 ? 4 : 2) != a.data.size())
      throw std::logic_error("npy: the element bytes do not match the shape");
    (void)npy::to_float(a);
    (void)npy::to_bf16(a);
  } catch (const UserError&) {
  }
}

void checkpoint(const uint8_t* data, size_t size) {
  try {
    const run::CheckpointState s =
        run::decode_checkpoint(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.ckpt");
    (void)data::StreamPosition::from_json(s.data_position);  // what a resume reads next
  } catch (const run::CheckpointError&) {
  } catch (const UserError&) {
  }
}

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {{"sweep_spec", sweep_spec}, {"run_config", run_config},
                                          {"shard", shard},           {"manifest", manifest},
                                          {"npy", npy},               {"checkpoint", checkpoint}};
  return all;
}

}  // namespace fp4::fuzz
