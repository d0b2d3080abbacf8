#!/usr/bin/env bash
# gpu-study-piece.sh — one piece of a study on a GPU machine that is lent for minutes at a time and
# keeps nothing between loans (issue 17, "How to run it in pieces"): restore the study's store from
# its committed, xz-compressed copy, run its grids under a time limit, and compress the store again
# for the caller to bring back and commit. Nothing finished is ever lost: `sweep run --time-limit`
# starts no run that would end after the limit, stops the running ones cleanly at the limit, and the
# next piece resumes the store where this one stopped (an interrupted run restarts from its last
# checkpoint only on the machine that holds it; on a fresh machine it starts over).
#
#   scripts/gpu-study-piece.sh FP4LAB CORPUS_DIR TIME_LIMIT_S OUT_DIR SPEC.toml [SPEC.toml ...]
#     FP4LAB      a CUDA build of fp4lab
#     CORPUS_DIR  the corpus's *.txt.xz (prepared into data/corpus with scripts/prepare-corpus.sh's rule)
#     TIME_LIMIT_S  seconds for all the specs together: they run in order, each with what is left
#     OUT_DIR     where the compressed store (<store>.xz) and the logs go ($OUT on the device)
# Every spec must name the same store. The store is restored from <store>.xz beside the specs when
# the store itself is absent. An MPS daemon is started when nvidia-cuda-mps-control exists and
# [executor] runs_per_gpu > 1 shares the GPU, and stopped at the end.
set -uo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,21p' "$0" >&2
  exit 2
fi
fp4lab=$(readlink -f "$1") corpus=$2 limit=$3 out=$4
shift 4
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"

case "$limit" in
  ''|*[!0-9]*) echo "gpu-study-piece: TIME_LIMIT_S must be whole seconds, got '$limit'" >&2; exit 2 ;;
esac
limit_s=$limit
start=$(date +%s)

# The data: deterministic, so the fingerprint is the one the store's runs were trained on.
if [ ! -f "$root/data/corpus/manifest.json" ]; then
  "$fp4lab" data build --tokenizer bytes "$corpus"/*.txt.xz --out "$root/data/corpus" > "$out/data.log" 2>&1 ||
    { cat "$out/data.log"; exit 1; }
fi

# The store, restored from its committed copy.
store=$(python3 - "$@" <<'PY'
import sys, tomllib, pathlib
stores = set()
for spec in sys.argv[1:]:
    p = pathlib.Path(spec).resolve()
    t = tomllib.loads(p.read_text())
    s = t["sweep"].get("store", t["sweep"]["name"] + ".db")
    stores.add(str((p.parent / s).resolve()))
if len(stores) != 1:
    sys.exit("gpu-study-piece: the specs name different stores: " + ", ".join(sorted(stores)))
print(stores.pop())
PY
) || exit 2
if [ ! -f "$store" ] && [ -f "$store.xz" ]; then
  xz -dk "$store.xz" && echo "gpu-study-piece: restored $store from $store.xz"
fi

mps=0
if command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/fp4lab-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/fp4lab-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d 2>/dev/null && mps=1 && echo "gpu-study-piece: MPS daemon started"
fi

rc=0
for spec in "$@"; do
  left=$(( limit_s - ($(date +%s) - start) ))
  if [ "$left" -le 30 ]; then echo "gpu-study-piece: no time left for $spec"; rc=124; continue; fi
  name=$(basename "$spec" .toml)
  echo "gpu-study-piece: $spec with ${left}s left"
  "$fp4lab" sweep run --plain --time-limit "${left}s" "$spec" > "$out/$name.log" 2>&1
  r=$?
  tail -n 3 "$out/$name.log"
  [ $r -eq 0 ] || rc=$r
  "$fp4lab" sweep status "$spec" > "$out/$name-status.txt" 2>&1
done

[ $mps -eq 1 ] && echo quit | nvidia-cuda-mps-control && echo "gpu-study-piece: MPS daemon stopped"
# One file to bring back: the store, its WAL folded in, compressed.
python3 - "$store" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()
PY
xz -T0 -9 -c "$store" > "$out/$(basename "$store").xz"
echo "gpu-study-piece: $(basename "$store").xz $(stat -c %s "$out/$(basename "$store").xz") bytes; $(( $(date +%s) - start )) s; exit $rc"
exit $rc
