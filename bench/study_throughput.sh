#!/usr/bin/env bash
# Throughput of the CUDA engine where a scaling study spends its GPU time (issue 15): the first
# study's run shape (results/first-study/study.toml: seq 1024, 131072 tokens per step, micro-batch
# 16, the byte corpus shuffled by sequence) for each size and recipe, one run alone and PACK runs
# sharing the GPU at once (under an MPS daemon started here when nvidia-cuda-mps-control exists,
# as `sweep run` does for runs_per_gpu > 1). Several builds can be measured side by side in one
# call: pass LABEL=BINARY pairs, and every case runs with each build in turn before the next case.
#
#   bench/study_throughput.sh CORPUS_DIR LABEL=FP4LAB [LABEL=FP4LAB ...]
#     CORPUS_DIR  shards made by `fp4lab data build` (the same data the study trains on)
#   environment: SIZES (default "d2 d4 d6"), RECIPES (default "bf16 e2m1 ufp4 nvfp4"), STEPS
#   (default 16), PACK (default 3; 0 or 1: alone only), PACKED_ONLY (1: the packed rows without the
#   alone ones, e.g. to add another PACK to a table), TOKENS (default 175000000)
#
# Output: one Markdown row per build, size, recipe and mode: the median tokens/s of each run over
# its steps after the first two (metrics.jsonl's tokens_per_s), summed over the runs sharing the GPU
# for the packed rows, and the ratio to the first build's same row. A packed run's median covers
# the steps when all PACK runs were training (they start together and take the same number of
# steps), so the sum is the GPU's aggregate rate. Then, per build and mode, the GPU time the
# measured cases would take at TOKENS tokens each (default 175M: the first study's main grid,
# 25M + 50M + 100M tokens per size and recipe): the main-grid estimate when SIZES is d2..d6 and
# every recipe is measured.
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,22p' "$0" >&2
  exit 2
fi
corpus=$(readlink -f "$1")
shift
steps=${STEPS:-16}
pack=${PACK:-3}
work=$(mktemp -d)
mps_started=0
cleanup() {
  if [ $mps_started -eq 1 ]; then echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ "$pack" -gt 1 ] && command -v nvidia-cuda-mps-control >/dev/null 2>&1 && [ -z "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && mps_started=1
  echo "MPS daemon started for the packed runs (pipe $CUDA_MPS_PIPE_DIRECTORY)" >&2
fi

# The median tokens/s of a run's steps after the first two.
median_rate() {
  grep '"kind":"train"' "$1" | tail -n +3 | sed -E 's/.*"tokens_per_s":([0-9.eE+-]+).*/\1/' | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) {print 0; exit} m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.0f", m}'
}

write_config() {  # SIZE RECIPE SEED FILE
  cat >"$4" <<JSON
{"model": {"preset": "$1", "seq_len": 1024}, "recipe": "$2", "device": "cuda", "data": "$corpus",
 "train": {"steps": $steps, "batch_tokens": 131072, "micro_batch": 16, "lr": 1e-3, "seed": $3},
 "eval": {"every": 0, "tokens": 16384}, "checkpoint": {"every": 0}}
JSON
}

declare -A first_rate
declare -A grid_s  # [label mode]: seconds for TOKENS tokens of every case measured
grid_tokens=${TOKENS:-175000000}
echo "| build | model | recipe | runs on the GPU | tokens/s (sum of medians) | vs first build |"
echo "|---|---|---|---|---:|---:|"
for size in ${SIZES:-d2 d4 d6}; do
  for recipe in ${RECIPES:-bf16 e2m1 ufp4 nvfp4}; do
    modes=1
    [ "$pack" -gt 1 ] && modes="1 $pack"
    [ "$pack" -gt 1 ] && [ "${PACKED_ONLY:-0}" = 1 ] && modes=$pack
    for n in $modes; do
      for pair in "$@"; do
        label=${pair%%=*} bin=$(readlink -f "${pair#*=}")
        case_dir=$work/$label-$size-$recipe-$n
        mkdir -p "$case_dir"
        pids=()
        for ((i = 0; i < n; ++i)); do
          write_config "$size" "$recipe" "$i" "$case_dir/config-$i.json"
          timeout 300 "$bin" train --config "$case_dir/config-$i.json" --dir "$case_dir/run-$i" --quiet \
            2>"$case_dir/err-$i" &
          pids+=($!)
        done
        failed=0
        for p in "${pids[@]}"; do wait "$p" || failed=1; done
        if [ $failed -ne 0 ]; then
          echo "| $label | $size | $recipe | $n | failed: $(tail -q -n 1 "$case_dir"/err-* | head -n 1) | |"
          continue
        fi
        total=0
        for ((i = 0; i < n; ++i)); do total=$((total + $(median_rate "$case_dir/run-$i/metrics.jsonl"))); done
        key=$size-$recipe-$n
        [ -z "${first_rate[$key]:-}" ] && first_rate[$key]=$total
        awk -v l="$label" -v s="$size" -v r="$recipe" -v n="$n" -v t="$total" -v f="${first_rate[$key]}" \
          'BEGIN {printf "| %s | %s | %s | %d | %.0f | %.2f× |\n", l, s, r, n, t, t / f}'
        grid_s[$label $n]=$(awk -v a="${grid_s[$label $n]:-0}" -v t="$total" -v g="$grid_tokens" \
          'BEGIN {printf "%.3f", a + (t > 0 ? g / t : 0)}')
        rm -rf "$case_dir"
      done
    done
  done
done
echo
echo "| build | runs on the GPU | minutes for $grid_tokens tokens of every case above |"
echo "|---|---|---:|"
for key in "${!grid_s[@]}"; do
  awk -v k="$key" -v s="${grid_s[$key]}" 'BEGIN {split(k, p, " "); printf "| %s | %s | %.1f |\n", p[1], p[2], s / 60}'
done | sort
