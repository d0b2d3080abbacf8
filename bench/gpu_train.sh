#!/usr/bin/env bash
# GPU training throughput of the CUDA engine: `fp4lab train --device cuda` for d6 and d12 under
# bf16, e2m1, ufp4 and nvfp4 with the PyTorch peer's shape (bench/peer_torch.py): seq_len 1024,
# 8 sequences per micro-step, 65536 tokens per step (8 micro-steps), random-ish synthetic data with
# the byte tokenizer's vocabulary. Prints one Markdown row per case: the median tokens/s over all
# steps but the first (metrics.jsonl's tokens_per_s), the step time, the model FLOP utilization
# against GEMM_TFLOPS (the bf16 GEMM rate measured in the same session: pass it), and the peak
# device memory the run reported. SIZES and RECIPES choose the cases (any model preset, MoE ones
# such as d6-e8k2 included: their MFU counts active FLOPs only).
# RATES_CSV=FILE also appends each case that trained to FILE as a rates file for `fp4lab plan
# STUDY.toml --rates FILE` (docs/statistics.md "Planning"; the header is written when FILE is new
# or empty): size, recipe, the median tokens/s, runs_per_device 1, the device (DEVICE, else the
# first name nvidia-smi lists) and this shape as the source. The plan uses such a row only where no
# store has measured the size and recipe; a study's batch and sequence train at another speed.
# Write into a new file: a second call's rows of the same size and recipe repeat the first's, which
# the plan refuses.
# Usage: [SIZES="d6 d12"] [RECIPES="bf16 e2m1 ufp4 nvfp4"] [RATES_CSV=FILE] [DEVICE=NAME]
#        bench/gpu_train.sh FP4LAB_BINARY GEMM_TFLOPS [STEPS]
set -euo pipefail
bin=$1
gemm_tflops=$2
steps=${3:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${RATES_CSV:-}" ]; then
  device=${DEVICE:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)}
  device=${device:-unknown GPU}
  if [ ! -s "$RATES_CSV" ]; then echo "size,recipe,tokens_per_s,runs_per_device,device,source" >"$RATES_CSV"; fi
fi
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
    # Quoted cells: the source holds commas (a device name with a quote would need doubling; none has).
    if [ -n "${RATES_CSV:-}" ] && [ "$tps" != 0 ]; then
      echo "$size,$recipe,$tps,1,\"$device\",\"bench/gpu_train.sh $(date -u +%F): seq 1024, 65536 tokens a step, micro-batch 8, median of steps 2-$steps\"" >>"$RATES_CSV"
    fi
  done
done
