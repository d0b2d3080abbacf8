#!/usr/bin/env bash
# Where one training step of the CUDA engine spends its GPU time: runs `fp4lab train --device cuda`
# under Nsight Compute (one metric, gpu__time_duration.sum, for every kernel of a short run) and
# hands the CSV to bench/step_breakdown.py, which takes the kernels of one whole optimizer step and
# groups them (GEMMs, attention, quantization, optimizer, the rest).
# The step has the benchmark's shape (bench/gpu_train.sh: seq 1024, 8 sequences a micro-step) but
# two micro-steps per optimizer step (16384 tokens), so one step is few enough launches for ncu:
# the breakdown counts what runs once a step once (the optimizer, and the first micro-step, which
# also makes the weights' copies) and weighs the second micro-step by MICRO_STEPS - 1 (MICRO_STEPS
# default 8, the 65536-token step): the same kernels as a step of MICRO_STEPS micro-steps.
# MICRO_BATCH (default 8) sets the sequences of the micro-step: 16 is the first study's shape
# (results/first-study/study.toml: 131072 tokens a step, so MICRO_STEPS=8 there too).
# Usage: [MICRO_BATCH=16] bench/gpu_step_profile.sh FP4LAB_BINARY SIZE RECIPE [OUT_DIR]
set -euo pipefail
bin=$1
size=$2
recipe=$3
out=${4:-.}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/config.json" <<JSON
{"model": {"preset": "$size", "seq_len": 1024}, "recipe": "$recipe", "device": "cuda",
 "data": "synthetic:markov?order=1&vocab=256&branch=64&seed=0",
 "train": {"steps": 2, "batch_tokens": $((2 * ${MICRO_BATCH:-8} * 1024)), "micro_batch": ${MICRO_BATCH:-8}},
 "eval": {"every": 0, "tokens": $((${MICRO_BATCH:-8} * 1024))}, "checkpoint": {"every": 0}}
JSON
ncu --clock-control none --metrics gpu__time_duration.sum --csv \
  "$bin" train --config "$work/config.json" --dir "$work/run" --quiet \
  >"$out/ncu-$size-$recipe.csv" 2>"$out/ncu-$size-$recipe.err"
python3 "$here/step_breakdown.py" "$out/ncu-$size-$recipe.csv" --micro-steps "${MICRO_STEPS:-8}" --profiled-passes 2 \
  --title "$size $recipe"
