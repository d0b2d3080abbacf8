#!/usr/bin/env bash
# Do two builds train the same bits? Trains one short run of the first study's shape (seq 1024,
# 131072 tokens a step, micro-batch 16, an evaluation every 2 steps) with each build and compares
# their metrics.jsonl train and eval rows (losses, gradient norms, learning rates) with the timing
# fields removed. For changes meant to keep the numerics (bench/RESULTS.md names the ones that did
# not). Prints "SAME BITS ..." or "DIFFERENT ..." with the first differing rows; exit code 0 when
# the bits agree, 1 when they differ, 2 when a run fails. PROBE_EVERY=N also runs the shrinkage
# probe every N steps and compares its probe and probe_gemm rows (for changes to the probe's path).
# Usage: [PROBE_EVERY=N] bench/same_bits.sh CORPUS_DIR FP4LAB_A FP4LAB_B SIZE RECIPE [STEPS]
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
corpus=$(readlink -f "$1")
bins=("$(readlink -f "$2")" "$(readlink -f "$3")")
size=$4 recipe=$5 steps=${6:-4} probe_every=${PROBE_EVERY:-0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/config.json" <<JSON
{"model": {"preset": "$size", "seq_len": 1024}, "recipe": "$recipe", "device": "cuda", "data": "$corpus",
 "train": {"steps": $steps, "batch_tokens": 131072, "micro_batch": 16, "lr": 1e-3, "seed": 3},
 "eval": {"every": 2, "tokens": 65536}, "probe": {"every": $probe_every}, "checkpoint": {"every": 0}}
JSON
for i in 0 1; do
  if ! timeout 300 "${bins[$i]}" train --config "$work/config.json" --dir "$work/run-$i" --quiet 2>"$work/err-$i"; then
    echo "run with ${bins[$i]} failed: $(tail -n 1 "$work/err-$i")"
    exit 2
  fi
  grep -E '"kind":"(train|eval|probe|probe_gemm)"' "$work/run-$i/metrics.jsonl" |
    sed -E 's/"(tokens_per_s|elapsed_s)":[0-9.eE+-]+,?//g' >"$work/rows-$i"
done
if cmp -s "$work/rows-0" "$work/rows-1"; then
  echo "SAME BITS $size $recipe ($(wc -l <"$work/rows-0") rows)"
else
  echo "DIFFERENT $size $recipe"
  diff "$work/rows-0" "$work/rows-1" | head -n 6
  exit 1
fi
