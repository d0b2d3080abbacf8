// ranks.cpp — see ranks.h.
#include "engine/run/ranks.h"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/files.h"
#include "base/parse_number.h"
#include "base/user_error.h"

namespace fp4::run {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

int env_int(const char* name, int min, int max) {
  const char* v = env(name);
  const std::optional<int> n = parse_integer<int>(v);
  if (!n || *n < min || *n > max)
    throw UserError(fmt::format("{}={}: must be a whole number from {} to {} (the data-parallel rank variables: "
                                "RANK, WORLD_SIZE, LOCAL_RANK)", name, v, min, max));
  return *n;
}

}  // namespace

std::optional<RankInfo> rank_from_environment() {
  const bool has_rank = env("RANK") != nullptr, has_world = env("WORLD_SIZE") != nullptr;
  if (!has_rank && !has_world) return std::nullopt;
  if (!has_rank || !has_world)
    throw UserError(fmt::format("{} is set but {} is not: a rank of a multi-GPU run needs both (or unset both to "
                                "let fp4lab train --gpus N start its ranks)",
                                has_rank ? "RANK" : "WORLD_SIZE", has_rank ? "WORLD_SIZE" : "RANK"));
  RankInfo r;
  r.world = env_int("WORLD_SIZE", 1, 1024);
  r.rank = env_int("RANK", 0, r.world - 1);
  r.local_rank = env("LOCAL_RANK") != nullptr ? env_int("LOCAL_RANK", 0, 1023) : r.rank;
  if (const char* t = env(kRendezvousTokenEnv)) {
    r.token = t;
  } else {
    for (const char* name : {"TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "MASTER_ADDR", "MASTER_PORT"}) {
      if (!r.token.empty()) r.token += ":";
      if (const char* v = env(name)) r.token += v;
    }
  }
  return r;
}

double rank_timeout_s() {
  const char* v = env("FP4LAB_NCCL_TIMEOUT_S");
  if (v == nullptr) return 600.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0))
    throw UserError(fmt::format("FP4LAB_NCCL_TIMEOUT_S={}: must be a number of seconds > 0 (default 600)", v));
  return s;
}

std::filesystem::path rendezvous_path(const std::filesystem::path& run_dir) { return run_dir / "rendezvous.json"; }

void write_rendezvous(const std::filesystem::path& run_dir, const Rendezvous& r) {
  const nlohmann::json j = {{"token", r.token}, {"nccl_id", r.nccl_id}, {"checkpoint", r.checkpoint}};
  write_file_atomic(rendezvous_path(run_dir), {j.dump() + "\n"});
}

Rendezvous wait_for_rendezvous(const std::filesystem::path& run_dir, const std::string& token, double timeout_s) {
  const std::filesystem::path path = rendezvous_path(run_dir);
  const double start = monotonic_s();
  for (;;) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      try {
        // Written by rename, so a file that exists is whole.
        const nlohmann::json j = nlohmann::json::parse(read_file(path));
        if (j.at("token").get<std::string>() == token)
          return Rendezvous{token, j.at("nccl_id").get<std::string>(), j.at("checkpoint").get<std::string>()};
      } catch (const std::exception&) {
        // Unreadable or another format: treated as an older launch's, waited past.
      }
    }
    if (monotonic_s() - start > timeout_s)
      throw std::runtime_error(fmt::format("no rendezvous from rank 0 in {} within {:.0f} s (FP4LAB_NCCL_TIMEOUT_S): "
                                           "rank 0 failed its checks or never started",
                                           path.string(), timeout_s));
    sleep_s(0.05);
  }
}

}  // namespace fp4::run
