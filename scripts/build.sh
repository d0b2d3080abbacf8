#!/usr/bin/env bash
# Installs the build's Debian packages (scripts/setup-deps.sh) and builds fp4lab into build/
# (override with FP4LAB_BUILD_DIR). Extra arguments go to CMake's configure step, e.g.
# -DFP4LAB_CUDA=OFF for a CPU-only build. FP4LAB_BUILD_TARGETS (space-separated, e.g. "fp4lab")
# builds only those targets and what they need; unset, everything (tests, benchmarks, fuzz targets).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FP4LAB_BUILD_DIR:-$root/build}
"$root/scripts/setup-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
targets=()
for t in ${FP4LAB_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
