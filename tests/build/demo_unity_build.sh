#!/usr/bin/env bash
# The demo's build against the regular one. scripts/demo.sh builds fp4lab CPU-only as a unity build
# (CMake compiles each target's C++ sources as a few combined files: half the build time on two
# cores, where a new user waits for it). Combining files can fail to compile (two files' file-local
# names collide) or, in principle, change what a call resolves to; this builds it the demo's way and
# trains two short runs (a dense ufp4 model with the shrinkage probe, an MoE e2m1 model) with it and
# with the regular build, which must give the same bits: every train, eval and probe row equal once
# the wall-clock fields are removed (bench/same_bits.sh --config).
#   demo_unity_build.sh SOURCE_DIR REGULAR_FP4LAB WORK_DIR
set -euo pipefail
src=$1 regular=$2 work=$3
mkdir -p "$work"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4LAB_CUDA=OFF -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$work/build" --target fp4lab >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log"; exit 1; }
unity=$work/build/cli/fp4lab
data='synthetic:markov?order=1&vocab=1024&branch=4&seed=1'
configs=(
  '{"model": {"n_layers": 1, "d_model": 32, "n_heads": 1, "head_dim": 32, "seq_len": 32}, "recipe": "ufp4", "device": "cpu",
    "data": "'"$data"'", "train": {"tokens": 16384, "batch_tokens": 512, "micro_batch": 16, "lr": 1e-2, "seed": 5},
    "eval": {"every": 8, "tokens": 4096}, "probe": {"every": 16}, "checkpoint": {"every": 0}}'
  '{"model": {"n_layers": 2, "d_model": 32, "n_heads": 1, "head_dim": 32, "seq_len": 32, "moe": {"experts": 4, "top_k": 2}},
    "recipe": "e2m1", "device": "cpu", "data": "'"$data"'", "train": {"tokens": 16384, "batch_tokens": 512, "micro_batch": 16,
    "lr": 1e-2, "seed": 6}, "eval": {"every": 8, "tokens": 4096}, "probe": {"every": 0}, "checkpoint": {"every": 0}}'
)
for i in "${!configs[@]}"; do
  printf '%s\n' "${configs[$i]}" >"$work/config-$i.json"
  bash "$src/bench/same_bits.sh" --config "$work/config-$i.json" "$regular" "$unity"
done
