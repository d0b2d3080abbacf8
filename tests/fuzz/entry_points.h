// entry_points.h — the readers of files a user (or an attacker) hands fp4lab, each as one function
// of bytes: the libFuzzer targets call them (tests/fuzz/fuzz_main.cpp, clang with ASan and UBSan,
// scripts/fuzz.sh), and so does the replay test of the normal build (tests/fuzz/replay_main.cpp),
// on every seed and every kept crash input under tests/fuzz/<target>/.
//
// Each accepts what the reader refuses with its documented error (fp4::UserError, or
// run::CheckpointError for checkpoints) and lets anything else escape: a crash, a sanitizer
// report or any other exception is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fp4::fuzz {

using EntryPoint = void (*)(const uint8_t* data, size_t size);

struct Target {
  const char* name;  // the directory under tests/fuzz/ and the fuzzer's name: fp4lab_fuzz_<name>
  EntryPoint run;
};

// sweep_spec: a sweep TOML, parsed and expanded (sweeps::parse_sweep_spec).
void sweep_spec(const uint8_t* data, size_t size);
// run_config: a run config's JSON text (run::config_from_text).
void run_config(const uint8_t* data, size_t size);
// shard: a token shard file, read whole and mapped (data::read_shard, data::MappedShard).
void shard(const uint8_t* data, size_t size);
// manifest: a shard directory's manifest.json (read strictly, then data::Manifest::from_json).
void manifest(const uint8_t* data, size_t size);
// npy: a .npy file (npy::parse, then its conversions to fp32 and bf16).
void npy(const uint8_t* data, size_t size);
// checkpoint: a checkpoint file (run::decode_checkpoint, then the stream position a resume reads).
void checkpoint(const uint8_t* data, size_t size);

const std::vector<Target>& targets();

}  // namespace fp4::fuzz
