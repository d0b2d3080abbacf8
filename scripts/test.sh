#!/usr/bin/env bash
# The test command: installs what the build needs, builds, and runs every test through ctest.
# [gpu] tests report "skipped" on a machine without a CUDA device.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FP4LAB_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" "$@"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
