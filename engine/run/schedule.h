// schedule.h — the learning rate of every optimizer step.
//
// Steps are numbered from 0 (the first update) to S − 1. With W warmup steps and floor m:
//   warmup   s < W:           lr · (s + 1) / W              (the first step is not a zero step)
//   cosine   s ≥ W:           m + (lr − m) · ½ · (1 + cos(π · (s − W) / (S − W)))
//   wsd      W ≤ s < S − D:   lr                             (stable)
//            s ≥ S − D:       lr − (lr − m) · (s − (S − D) + 1) / D   (linear, reaches m at s = S − 1)
// where D = max(1, round(decay_fraction · S)). All in double; the optimizer rounds to fp32 once.
#pragma once

#include <cstdint>

#include "engine/run/config.h"

namespace fp4::run {

double learning_rate(const TrainConfig& t, int64_t step);

// The number of decay steps D of a wsd schedule.
int64_t wsd_decay_steps(const TrainConfig& t);

}  // namespace fp4::run
