#!/usr/bin/env bash
# CPU training throughput of the reference engine: `fp4lab train` for d2 and d4 under the bf16 and
# ufp4 recipes, on a synthetic source with the byte tokenizer's vocabulary (256), seq_len 256,
# 4096 tokens per step (4 sequences per micro-step, 4 micro-steps).
# Prints one Markdown table row per case:
#   wall tokens/s   the median over all steps but the first of metrics.jsonl's tokens_per_s
#                   (a step's tokens / its wall time): what a run sees, load included;
#   tokens/CPU-s    training tokens / CPU seconds of the whole process (setup and the two tiny
#                   evaluations included): robust to other load when OMP_NUM_THREADS=1.
# Usage: [OMP_NUM_THREADS=N] bench/cpu_train.sh [FP4LAB_BINARY] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-$root/build/cli/fp4lab}
steps=${2:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| model | recipe | threads | wall tokens/s (median) | tokens/CPU-s | steps |"
echo "|---|---|---|---|---|---|"
for size in d2 d4; do
  for recipe in bf16 ufp4; do
    cat >"$work/$size-$recipe.json" <<JSON
{"model": {"preset": "$size", "seq_len": 256}, "recipe": "$recipe",
 "data": "synthetic:markov?order=2&vocab=256&branch=8&seed=0",
 "train": {"steps": $steps, "batch_tokens": 4096, "micro_batch": 4},
 "eval": {"every": 0, "tokens": 256}, "checkpoint": {"every": 0}}
JSON
    cpu=$( { /usr/bin/time -f "%U %S" "$bin" train --config "$work/$size-$recipe.json" \
               --dir "$work/$size-$recipe" --quiet 2>&1 1>/dev/null; } | tail -1 | awk '{print $1 + $2}')
    wall=$(grep '"kind":"train"' "$work/$size-$recipe/metrics.jsonl" | tail -n +2 |
           sed -E 's/.*"tokens_per_s":([0-9.eE+-]+).*/\1/' | sort -g |
           awk '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.0f", m}')
    per_cpu=$(awk -v t=$((steps * 4096)) -v c="$cpu" 'BEGIN {printf "%.0f", t / c}')
    echo "| $size | $recipe | ${OMP_NUM_THREADS:-$(nproc)} | $wall | $per_cpu | $steps |"
  done
done
