// run_duration.h — how long a run of a sweep is expected to take on this machine, from the runs
// the store has seen finish: what `sweep run --time-limit` decides with (docs/sweeps.md).
//
// Each succeeded run in the store contributes its wall seconds per training token: the summed
// durations of its attempts (start to end, so start-up, evaluations and checkpoints are in) over
// its tokens. A run is estimated from the median of the runs with its model and recipe; failing
// those, of the runs with its model; failing those, from the median FLOP rate of all (training
// FLOPs per token × tokens over the same wall seconds), scaled by its own FLOPs. With nothing
// measured there is no estimate. Runs packed several to a GPU were measured packed, so their
// estimates include the sharing.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"
#include "sweeps/spec.h"

namespace fp4::sweeps {

class RunDurationModel {
 public:
  // Reads every succeeded run of the store with finished attempts.
  explicit RunDurationModel(const store::Store& store);
  // Adds (or replaces) one run's measurement, e.g. when it has just succeeded.
  void measure(const store::Store& store, const std::string& run_id);
  // Expected wall seconds for `tokens_left` more training tokens of `point`; empty when nothing
  // in the store says.
  std::optional<double> estimate_s(const GridPoint& point, int64_t tokens_left) const;
  size_t measured_runs() const { return runs_.size(); }

 private:
  struct Measurement {
    std::string model, recipe;
    double seconds_per_token = 0;
    double flops_per_second = 0;
  };
  std::map<std::string, Measurement> runs_;  // by run id
};

}  // namespace fp4::sweeps
