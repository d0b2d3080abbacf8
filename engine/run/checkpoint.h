// checkpoint.h — everything a run needs to continue bit for bit, in one checksummed file.
//
// File layout (little-endian), `checkpoints/step_<10-digit step>.ckpt`:
//   offset  0  8 bytes   magic "FP4LCKPT"
//           8  u32       format version (1)
//          12  u32       header size (96)
//          16  u64       payload size in bytes
//          24  64 bytes  SHA-256 of the payload, lowercase hex
//          88  8 bytes   zero
//          96  payload:  u64 meta size, meta (UTF-8 JSON), then the arrays the meta lists, each a
//                        run of little-endian fp32 values, in the listed order
// The meta holds the step, tokens seen, the config hash, the data stream's position and the
// array directory ({"name", "count"} for params, adam_m, adam_v). A file is written under a
// temporary name, fsynced, renamed into place, and the directory fsynced; then all but the newest
// two checkpoints are deleted. A reader trusts nothing it has not checksummed: a truncated file or
// a flipped bit is reported, and the previous checkpoint is used instead.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4::run {

constexpr int kCheckpointsKept = 2;

struct CheckpointState {
  int64_t step = 0;                 // optimizer steps completed
  int64_t tokens_seen = 0;
  std::string config_hash;          // the resolved config's SHA-256 (config.h)
  nlohmann::json data_position;     // the train stream's position, as the data module serializes it
  nlohmann::json extra = nlohmann::json::object();  // anything else a later version needs
  std::vector<float> params;        // fp32 master weights
  std::vector<float> adam_m, adam_v;
};

// A checkpoint that fails its checks: bad magic, wrong size, checksum mismatch, bad meta.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The file's bytes. Throws std::logic_error when the three arrays differ in length.
std::string encode_checkpoint(const CheckpointState& s);
// Parses and verifies; `name` appears in the error. Throws CheckpointError.
CheckpointState decode_checkpoint(std::string_view bytes, const std::string& name);

// "step_0000000020.ckpt"
std::string checkpoint_file_name(int64_t step);
// The checkpoint files in `dir` (checkpoints/), oldest first, by the step in their names.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir);

// Writes atomically into `dir` (created if missing) and prunes to the newest kCheckpointsKept.
// Returns the path written.
std::filesystem::path write_checkpoint(const std::filesystem::path& dir, const CheckpointState& s);

struct LoadedCheckpoint {
  CheckpointState state;
  std::filesystem::path path;
  std::vector<std::string> warnings;  // one line per checkpoint that was skipped, and why
};

// The newest checkpoint in `dir` that verifies. A newer one that does not verify is renamed to
// "<name>.corrupt" (kept for inspection, never read again) and reported in `warnings`. Returns
// nothing when `dir` holds no checkpoint; throws CheckpointError when it holds some but none
// verifies (and then leaves them all in place, so every retry reports the same error).
std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::filesystem::path& dir);

}  // namespace fp4::run
