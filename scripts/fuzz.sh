#!/usr/bin/env bash
# fuzz.sh TARGET SECONDS [libFuzzer options...] — fuzzes one reader (tests/fuzz/README.md) for
# SECONDS seconds at the lowest CPU priority, in a separate clang build (build-fuzz/, override with
# FP4LAB_FUZZ_BUILD_DIR) where all of fp4lab's code carries ASan, UBSan and libFuzzer's coverage.
#
#   TARGET: sweep_spec, run_config, shard, manifest, npy or checkpoint
#
# The corpus grows in build-fuzz/corpus/TARGET (seeded from tests/fuzz/TARGET/seeds, which is
# only read); a crash, leak, timeout or sanitizer report is written to tests/fuzz/TARGET/crashes/,
# to be fixed and kept there as a regression input (the normal build's ctest replays that directory).
# Installs clang-14, libFuzzer (libclang-rt-14-dev) and OpenMP for clang (libomp-14-dev) if missing.
# FP4LAB_BUILD_LOCK=FILE: configure and build under flock FILE (a machine shared by several builds);
# the lock is released before fuzzing starts.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer options...]" >&2
  exit 2
fi
target=$1
seconds=$2
shift 2
[ -d "$root/tests/fuzz/$target/seeds" ] || { echo "fuzz.sh: no target $target (tests/fuzz/$target/seeds)" >&2; exit 2; }
build=${FP4LAB_FUZZ_BUILD_DIR:-$root/build-fuzz}

missing=()
for p in clang-14 libclang-rt-14-dev libomp-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "fuzz.sh: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
"$root/scripts/setup-deps.sh" >/dev/null

lock=()
[ -n "${FP4LAB_BUILD_LOCK:-}" ] && lock=(flock "$FP4LAB_BUILD_LOCK")
if [ ! -f "$build/CMakeCache.txt" ]; then
  "${lock[@]}" cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
    -DCMAKE_CXX_COMPILER=clang++-14 -DFP4LAB_CUDA=OFF -DFP4LAB_FUZZ=ON >/dev/null
fi
"${lock[@]}" cmake --build "$build" --target "fp4lab_fuzz_$target"

corpus=$build/corpus/$target
crashes=$root/tests/fuzz/$target/crashes
mkdir -p "$corpus" "$crashes"
dict=()
[ -f "$root/tests/fuzz/$target.dict" ] && dict=(-dict="$root/tests/fuzz/$target.dict")
echo "fuzz.sh: $target for $seconds s (corpus $corpus, findings to $crashes)"
exec nice -n 19 "$build/tests/fuzz/fp4lab_fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
  -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" "$@" "$corpus" "$root/tests/fuzz/$target/seeds"
