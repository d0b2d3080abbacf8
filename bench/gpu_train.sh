#!/usr/bin/env bash
# GPU training throughput of the CUDA engine: `fp4lab train --device cuda` for d6 and d12 under
# bf16, e2m1, ufp4 and nvfp4 with the PyTorch peer's shape (bench/peer_torch.py): seq_len 1024,
# 8 sequences per micro-step, 65536 tokens per step (8 micro-steps), random-ish synthetic data with
# the byte tokenizer's vocabulary. Prints one Markdown row per case: the median tokens/s over all
# steps but the first (metrics.jsonl's tokens_per_s), the step time, the model FLOP utilization
# against GEMM_TFLOPS (the bf16 GEMM rate measured in the same session: pass it), and the peak
# device memory the run reported. SIZES and RECIPES choose the cases (any model preset, MoE ones
# such as d6-e8k2 included: their MFU counts active FLOPs only).
# Usage: [SIZES="d6 d12"] [RECIPES="bf16 e2m1 ufp4 nvfp4"] bench/gpu_train.sh FP4LAB_BINARY GEMM_TFLOPS [STEPS]
set -euo pipefail
bin=$1
gemm_tflops=$2
steps=${3:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| model | recipe | tokens/s (median) | step ms | MFU | peak device MiB | steps |"
echo "|---|---|---|---|---|---|---|"
for size in ${SIZES:-d6 d12}; do
  for recipe in ${RECIPES:-bf16 e2m1 ufp4 nvfp4}; do
    cat >"$work/$size-$recipe.json" <<JSON
{"model": {"preset": "$size", "seq_len": 1024}, "recipe": "$recipe", "device": "cuda",
 "data": "synthetic:markov?order=1&vocab=256&branch=64&seed=0",
 "train": {"steps": $steps, "batch_tokens": 65536, "micro_batch": 8},
 "eval": {"every": 0, "tokens": 8192}, "checkpoint": {"every": 0}}
JSON
    if ! timeout 300 "$bin" train --config "$work/$size-$recipe.json" --dir "$work/$size-$recipe" --quiet \
         2>"$work/$size-$recipe.err"; then
      echo "| $size | $recipe | failed: $(tail -n 1 "$work/$size-$recipe.err") | | | | |"
      continue
    fi
    m="$work/$size-$recipe/metrics.jsonl"
    tps=$(grep '"kind":"train"' "$m" | tail -n +2 | sed -E 's/.*"tokens_per_s":([0-9.eE+-]+).*/\1/' | sort -g |
          awk '{v[NR] = $1} END {if (NR == 0) {print 0; exit} m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.0f", m}')
    fpt=$(grep '"kind":"run"' "$m" | head -n 1 | sed -E 's/.*"flops_per_token":([0-9.eE+-]+).*/\1/')
    peak=$(grep '"peak_device_bytes"' "$m" | tail -n 1 | sed -E 's/.*"peak_device_bytes":([0-9]+).*/\1/')
    awk -v s="$size" -v r="$recipe" -v t="$tps" -v f="$fpt" -v g="$gemm_tflops" -v p="${peak:-0}" -v n="$steps" \
      'BEGIN {printf "| %s | %s | %.0f | %.1f | %.1f%% | %.0f | %d |\n", s, r, t, 65536 / t * 1000, 100 * f * t / (g * 1e12), p / 1048576, n}'
  done
done
