#!/usr/bin/env bash
# fidelity.sh — fp4lab's CUDA BF16 training against itself and against an independent PyTorch
# implementation of the same documented model (bench/fidelity_peer.py), on one GPU.
#
#   bench/fidelity.sh FP4LAB DATA OUTDIR SEEDS [PEER_SEEDS]
#     FP4LAB      the fp4lab executable (a CUDA build)
#     DATA        a shard directory (scripts/prepare-corpus.sh)
#     OUTDIR      run directories and the peer's metrics go here (fresh)
#     SEEDS       comma-separated fp4lab seeds, e.g. 0,1,2,3
#     PEER_SEEDS  comma-separated seeds for the peer's own initial weights (default: SEEDS; "none": skip)
#
# For every seed s:
#   A_s  fp4lab, stopped after step 1 (its checkpoint is the common starting point), then resumed to
#        the end: bit-identical to an uninterrupted run (tests/test_run_trainer.cpp, tests/gpu).
#   B_s  A_s's step-1 checkpoint with one master weight moved by one ulp of its bf16 copy (what the
#        GEMMs read; one fp32 ulp usually changes nothing they see), resumed: how far two runs of
#        the same engine end apart from states that differ by the least possible amount (the chaos
#        floor).
#   peer-same-init-s<s>  the peer from A_s's step-1 checkpoint (weights, AdamW moments, data
#        position): an independent implementation from the same state.
#   peer-s<s>  the peer from its own initial weights (PEER_SEEDS).
# The shape (FIDELITY_* variables, defaults in parentheses) is the study's: d4, seq 1024, 131072
# tokens per step in micro-batches of 16, 400 steps, lr 3e-3 cosine, eval every 100 steps on
# 1048576 validation tokens, shuffled stream, data seed = run seed.
# FIDELITY_SHUFFLE (sequences) "none" reads the stream in file order on both sides.
# FIDELITY_SAME_STATE (1) 0 skips B_s and the same-state peer runs (A_s then trains straight through).
# FIDELITY_JOBS (3) fp4lab processes share the GPU beside the peer; an MPS daemon is started when
# nvidia-cuda-mps-control exists, so their kernels run at once. bench/fidelity_report.py reads
# OUTDIR and prints the comparison.
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,27p' "$0" >&2
  exit 2
fi
fp4lab=$(readlink -f "$1") data=$(readlink -f "$2") out=$3 seeds=$4 peer_seeds=${5:-$4}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
model=${FIDELITY_MODEL:-d4} steps=${FIDELITY_STEPS:-400} lr=${FIDELITY_LR:-3e-3}
seq=${FIDELITY_SEQ:-1024} batch=${FIDELITY_BATCH_TOKENS:-131072} micro=${FIDELITY_MICRO_BATCH:-16}
eval_every=${FIDELITY_EVAL_EVERY:-100} eval_tokens=${FIDELITY_EVAL_TOKENS:-1048576} jobs=${FIDELITY_JOBS:-3}
device=${FIDELITY_DEVICE:-cuda} shuffle=${FIDELITY_SHUFFLE:-sequences} same_state=${FIDELITY_SAME_STATE:-1}
mkdir -p "$out/init" "$out/peer"
out=$(readlink -f "$out")

mps=0
if command -v nvidia-cuda-mps-control >/dev/null && [ -z "${FIDELITY_NO_MPS:-}" ]; then
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps-pipe CUDA_MPS_LOG_DIRECTORY=$out/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && mps=1 && echo "fidelity: MPS daemon started"
fi
stop_mps() { [ $mps -eq 1 ] && echo quit | nvidia-cuda-mps-control && echo "fidelity: MPS daemon stopped"; }
trap stop_mps EXIT

config() {  # config SEED > file
  cat <<JSON
{"model": {"preset": "$model", "seq_len": $seq}, "recipe": "bf16", "data": "$data", "device": "$device",
 "train": {"steps": $steps, "batch_tokens": $batch, "micro_batch": $micro, "lr": $lr, "schedule": "cosine", "seed": $1,
           "shuffle": "$shuffle"},
 "eval": {"every": $eval_every, "tokens": $eval_tokens}, "checkpoint": {"every": 0}}
JSON
}

start=$(date +%s)
ckpts=() init_seeds=()
for s in ${seeds//,/ }; do
  config "$s" > "$out/config-s$s.json"
  [ "$same_state" = 1 ] || continue
  "$fp4lab" train --config "$out/config-s$s.json" --dir "$out/A_s$s" --stop-after 1 --quiet
  rc=$?
  [ $rc -eq 143 ] || { echo "fidelity: A_s$s stopped with exit $rc, not 143"; exit 1; }
  cp "$out/A_s$s/checkpoints/step_0000000001.ckpt" "$out/init/s$s.ckpt"
  cp -r "$out/A_s$s" "$out/B_s$s"
  python3 "$here/fidelity_peer.py" --perturb-checkpoint "$out/init/s$s.ckpt" \
    "$out/B_s$s/checkpoints/step_0000000001.ckpt" || exit 1
  ckpts+=("$out/init/s$s.ckpt") init_seeds+=("$s")
done
echo "fidelity: step-1 checkpoints of seeds $seeds in $(( $(date +%s) - start )) s"

peer_pid=
if [ "$peer_seeds" != none ]; then
  peer_args=(--data "$data" --model "$model" --seq-len "$seq" --micro-batch "$micro" --batch-tokens "$batch"
             --steps "$steps" --lr "$lr" --eval-every "$eval_every" --eval-tokens "$eval_tokens"
             --out-dir "$out/peer" --seeds "$peer_seeds" --shuffle "$shuffle"
             --init-from "$(IFS=,; echo "${ckpts[*]:-}")" --init-seeds "$(IFS=,; echo "${init_seeds[*]:-}")")
  PYTHONUNBUFFERED=1 python3 "$here/fidelity_peer.py" "${peer_args[@]}" > "$out/peer/peer.log" 2>&1 &
  peer_pid=$!
fi

# The fp4lab resumes, FIDELITY_JOBS at a time.
runs=(A B)
[ "$same_state" = 1 ] || runs=(A)
for s in ${seeds//,/ }; do
  for run in "${runs[@]}"; do echo "$run $s"; done
done | xargs -P "$jobs" -L 1 sh -c '"$0" train --config "$1/config-s$3.json" --dir "$1/$2_s$3" --resume --quiet ||
                                    echo "fidelity: $2_s$3 exited $?"' "$fp4lab" "$out"
echo "fidelity: fp4lab runs done at $(( $(date +%s) - start )) s"
if [ -n "$peer_pid" ]; then
  wait "$peer_pid"; echo "fidelity: peer exited $? at $(( $(date +%s) - start )) s"
fi
