#!/usr/bin/env bash
# Do two builds train the same bits? Trains one short run with each build and compares their
# metrics.jsonl train and eval rows (losses, gradient norms, learning rates) with the timing fields
# removed. For changes meant to keep the numerics (bench/RESULTS.md names the ones that did not).
# Prints "SAME BITS ..." or "DIFFERENT ..." with the first differing rows; exit code 0 when the bits
# agree, 1 when they differ or there is no row to compare, 2 when a run fails.
# Usage: [PROBE_EVERY=N] bench/same_bits.sh CORPUS_DIR FP4LAB_A FP4LAB_B SIZE RECIPE [STEPS]
#   a run of the first study's shape on the GPU (seq 1024, 131072 tokens a step, micro-batch 16, an
#   evaluation every 2 steps); PROBE_EVERY=N also runs the shrinkage probe every N steps and
#   compares its probe and probe_gemm rows (for changes to the probe's path).
#        bench/same_bits.sh --config CONFIG.json FP4LAB_A FP4LAB_B
#   the run CONFIG.json describes (any device and data; probe rows compared where it probes).
set -euo pipefail
usage() { sed -n '2,12p' "$0" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "${1:-}" = --config ]; then
  [ $# -eq 4 ] || usage
  cp "$2" "$work/config.json"
  bins=("$(readlink -f "$3")" "$(readlink -f "$4")")
  label=$(basename "$2")
else
  [ $# -ge 5 ] || usage
  corpus=$(readlink -f "$1")
  bins=("$(readlink -f "$2")" "$(readlink -f "$3")")
  size=$4 recipe=$5 steps=${6:-4} probe_every=${PROBE_EVERY:-0}
  label="$size $recipe"
  cat >"$work/config.json" <<JSON
{"model": {"preset": "$size", "seq_len": 1024}, "recipe": "$recipe", "device": "cuda", "data": "$corpus",
 "train": {"steps": $steps, "batch_tokens": 131072, "micro_batch": 16, "lr": 1e-3, "seed": 3},
 "eval": {"every": 2, "tokens": 65536}, "probe": {"every": $probe_every}, "checkpoint": {"every": 0}}
JSON
fi
for i in 0 1; do
  if ! timeout 300 "${bins[$i]}" train --config "$work/config.json" --dir "$work/run-$i" --quiet 2>"$work/err-$i"; then
    echo "run with ${bins[$i]} failed: $(tail -n 1 "$work/err-$i")"
    exit 2
  fi
  grep -E '"kind":"(train|eval|probe|probe_gemm)"' "$work/run-$i/metrics.jsonl" |
    sed -E 's/"(tokens_per_s|elapsed_s)":[0-9.eE+-]+,?//g' >"$work/rows-$i" || true
done
rows=$(wc -l <"$work/rows-0")
if [ "$rows" -eq 0 ]; then
  echo "DIFFERENT $label: no train or eval row to compare"
  exit 1
elif cmp -s "$work/rows-0" "$work/rows-1"; then
  echo "SAME BITS $label ($rows rows)"
else
  echo "DIFFERENT $label"
  diff "$work/rows-0" "$work/rows-1" | head -n 6
  exit 1
fi
