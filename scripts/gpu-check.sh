#!/usr/bin/env bash
# gpu-check.sh — the one command run on the GPU machine: configure and build the CUDA targets, run
# the [gpu] tests, then the benchmarks. Every log is also written to $OUT when it is set (the
# device tool's output folder); a summary is printed last.
#
#   source .devdeps/activate.sh && bash scripts/gpu-check.sh [--no-tests] [--no-bench] [--engine]
#                                   [--peer] [--profile] [--step-profile] [--prebuilt DIR]
#
# Benchmarks: the quantizers against a device-to-device copy (default); with --engine also the
# attention kernels and the training engine (bench/gpu_train.sh, MFU against the bf16 GEMM rate
# the attention benchmark measures in this same run); with --peer also the compiled PyTorch peer
# (bench/peer_torch.py) on the same shapes, so fp4lab and the peer are measured side by side.
# (PEER_MODELS and PEER_RECIPES, default d6,d12 and bf16,e2m1,ufp4,nvfp4, narrow the peer's set;
# PEER_MODELS takes the MoE presets too, e.g. d6-e8k2,d6: the peer's experts then run as
# torch._grouped_mm grouped GEMMs, and each line says so in "expert_path".)
# --profile also runs Nsight Compute on the fused kernel (two launches) into ncu.txt.
# --step-profile: the GPU time of one d12 training step by kernel group, for bf16 and nvfp4
# (bench/gpu_step_profile.sh; ncu-*.csv kept in the log folder).
# --prebuilt DIR skips the build and runs the binaries in DIR (fp4lab, fp4lab_gpu_tests,
# fp4lab_bench_quantize, fp4lab_bench_attention), built elsewhere from this tree with the same
# configuration (Release, CMAKE_CUDA_ARCHITECTURES=90; an x86-64 machine with the same CUDA), to
# save device time; carry DIR with the call.
#
# Exit status: the tests' (0 when all passed), or the build's when it failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tests=1
bench=1
engine=0
step_profile=0
peer=0
profile=0
prebuilt=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) tests=0 ;;
    --no-bench) bench=0 ;;
    --step-profile) step_profile=1 ;;
    --engine) engine=1 ;;
    --peer) peer=1 ;;
    --profile) profile=1 ;;
    --prebuilt) prebuilt=$2; shift ;;
  esac
  shift
done
logdir=${OUT:-build-gpu/logs}
mkdir -p "$logdir"
build=build-gpu

echo "== machine" | tee "$logdir/machine.log"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  nvcc --version | tail -n 2; cmake --version | head -n 1; nproc; } 2>&1 | tee -a "$logdir/machine.log"

tests_bin=$build/tests/fp4lab_gpu_tests
bench_bin=$build/bench/fp4lab_bench_quantize
attention_bin=$build/bench/fp4lab_bench_attention
fp4lab_bin=$build/cli/fp4lab
if [ -n "$prebuilt" ]; then
  echo "== prebuilt binaries from $prebuilt (no build here)"
  tests_bin=$prebuilt/fp4lab_gpu_tests
  bench_bin=$prebuilt/fp4lab_bench_quantize
  attention_bin=$prebuilt/fp4lab_bench_attention
  fp4lab_bin=$prebuilt/fp4lab
  ls -l "$tests_bin" "$bench_bin" || exit 1
else
  echo "== configure and build"
  start=$(date +%s)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    >"$logdir/build.log" 2>&1 &&
    cmake --build "$build" --target fp4lab fp4lab_gpu_tests fp4lab_bench_quantize fp4lab_bench_attention \
      >>"$logdir/build.log" 2>&1
  build_rc=$?
  echo "build: exit $build_rc in $(( $(date +%s) - start )) s"
  if [ $build_rc -ne 0 ]; then
    grep -E "error|Error" -A3 "$logdir/build.log" | head -n 60
    exit $build_rc
  fi
fi

test_rc=0
if [ $tests -eq 1 ]; then
  echo "== [gpu] tests"
  start=$(date +%s)
  timeout 400 "$tests_bin" "[gpu]" --durations yes >"$logdir/tests.log" 2>&1
  test_rc=$?
  echo "tests: exit $test_rc in $(( $(date +%s) - start )) s"
  grep -E "^[0-9.]+ s: |FAILED|failed|passed|skipped|with expansion" "$logdir/tests.log" | head -n 40
fi

if [ $bench -eq 1 ]; then
  echo "== benchmark: $bench_bin 8192 8192"
  timeout 240 "$bench_bin" 8192 8192 >"$logdir/bench.log" 2>&1
  echo "bench: exit $?"
  cat "$logdir/bench.log"
fi

if [ $engine -eq 1 ]; then
  echo "== benchmark: attention (and the bf16 GEMM rate)"
  timeout 120 "$attention_bin" >"$logdir/attention.log" 2>&1
  echo "attention bench: exit $?"
  cat "$logdir/attention.log"
  gemm=$(grep -oE "[0-9.]+ TFLOP/s" "$logdir/attention.log" | head -n 1 | awk '{print $1}')
  echo "== benchmark: training engine (bench/gpu_train.sh, MFU against ${gemm:-?} TFLOP/s)"
  timeout 400 bash bench/gpu_train.sh "$fp4lab_bin" "${gemm:-790}" 6 2>&1 | tee "$logdir/train.md"
fi

if [ $peer -eq 1 ]; then
  echo "== benchmark: the compiled PyTorch peer, same shapes"
  timeout 590 python3 bench/peer_torch.py --model "${PEER_MODELS:-d6,d12}" --recipe "${PEER_RECIPES:-bf16,e2m1,ufp4,nvfp4}" \
    --steps 10 --warmup 3 \
    >"$logdir/peer.jsonl" 2>"$logdir/peer.err"
  echo "peer: exit $?"
  cat "$logdir/peer.jsonl"
fi

if [ $step_profile -eq 1 ] && command -v ncu >/dev/null 2>&1; then
  for recipe in bf16 nvfp4; do
    echo "== step profile: d12 $recipe"
    timeout 240 bash bench/gpu_step_profile.sh "$(cd "$(dirname "$fp4lab_bin")" && pwd)/$(basename "$fp4lab_bin")" \
      d12 "$recipe" "$logdir" 2>&1 | tee "$logdir/step-d12-$recipe.md"
  done
fi

if [ $profile -eq 1 ] && command -v ncu >/dev/null 2>&1; then
  echo "== ncu: fused kernel, e2m1 RN, row copy then both copies"
  timeout 300 ncu --clock-control none -k regex:"fused_quantize|fused_strip|row_rn" -c 2 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
    "$bench_bin" --profile >"$logdir/ncu.txt" 2>&1
  echo "ncu: exit $?"
  grep -E "Duration|Throughput|Achieved Occupancy|Registers|Issued Warp|No Eligible|Stall|Warp Cycles|One or More|Bank" "$logdir/ncu.txt" | head -n 80
fi

# The kernels' resource use and machine code, for reading offline (where cuobjdump exists).
if command -v cuobjdump >/dev/null 2>&1; then
  for f in quantize_b16 quantize_b32 quantize_rows quantize; do
    # With --prebuilt, objects carried in DIR (DIR/quantize_b16.cu.o, ...) are read instead.
    obj=$(find "${prebuilt:-$build}" -name "$f.cu.o" 2>/dev/null | head -n 1)
    [ -n "$obj" ] || continue
    cuobjdump --dump-resource-usage "$obj" >>"$logdir/resources.txt" 2>&1
    [ "$f" = quantize_b16 ] && cuobjdump --dump-sass "$obj" 2>&1 | gzip >"$logdir/sass_$f.txt.gz"
  done
fi
exit $test_rc
