#!/usr/bin/env bash
# The test command: installs what the build and the tests need, builds, and runs every test through
# ctest. [gpu] tests report "skipped" on a machine without a CUDA device; the real-Slurm test
# reports "skipped", with the reason, where its daemons cannot run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FP4LAB_BUILD_DIR:-$root/build}
"$root/scripts/setup-test-deps.sh"
"$root/scripts/build.sh" "$@"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
