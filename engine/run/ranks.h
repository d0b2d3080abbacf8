// ranks.h — the processes of a data-parallel run (docs/train.md, "Several GPUs"): which rank this
// process is, and how the ranks meet.
//
// A rank learns its place from the environment, with torchrun's names: RANK, WORLD_SIZE and
// LOCAL_RANK (the GPU it uses; default RANK). `fp4lab train --gpus N` sets them for the N rank
// processes it starts (rank_launcher.h); a launcher of one's own (torchrun, srun) may set them
// instead and start `fp4lab train --gpus N` N times.
//
// The ranks meet through a file in the run directory: rank 0, once every check of the run has
// passed, writes DIR/rendezvous.json atomically with the launch's token, NCCL's unique id (hex)
// and the checkpoint it resumes from; the other ranks wait for a file with their token. The token
// tells this launch's file from an older one's: FP4LAB_RENDEZVOUS_TOKEN when set (our launcher
// draws a fresh one per launch), else torchrun's TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT,
// MASTER_ADDR and MASTER_PORT joined.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace fp4::run {

struct RankInfo {
  int rank = 0;
  int world = 1;
  int local_rank = 0;   // the CUDA device index this rank trains on
  std::string token;    // the rendezvous token (see above)
  bool writer() const { return rank == 0; }  // rank 0 alone writes the run directory
};

// This process's rank, from the environment; nothing when neither RANK nor WORLD_SIZE is set.
// Throws UserError (one line naming the variable) when one is set without the other or a value
// is not a whole number in range.
std::optional<RankInfo> rank_from_environment();

// The environment variable names the launcher sets.
inline constexpr const char* kRendezvousTokenEnv = "FP4LAB_RENDEZVOUS_TOKEN";
// Seconds a rank waits for the others (the rendezvous, NCCL's setup, one collective) before it
// gives up and aborts the communicator: FP4LAB_NCCL_TIMEOUT_S, default 600 (rank 0 may be writing
// a large checkpoint while the others wait in the next step's all-reduce). Throws UserError when
// the variable is not a positive number.
double rank_timeout_s();

struct Rendezvous {
  std::string token;
  std::string nccl_id;      // ncclUniqueId as hex
  std::string checkpoint;   // the checkpoint rank 0 resumes from (absolute path), empty: a fresh start
};

std::filesystem::path rendezvous_path(const std::filesystem::path& run_dir);
// Atomically (temp file + rename).
void write_rendezvous(const std::filesystem::path& run_dir, const Rendezvous& r);
// Polls until DIR/rendezvous.json holds `token`; a file with another token is an older launch's and
// is waited past. Throws std::runtime_error after timeout_s.
Rendezvous wait_for_rendezvous(const std::filesystem::path& run_dir, const std::string& token, double timeout_s);

}  // namespace fp4::run
