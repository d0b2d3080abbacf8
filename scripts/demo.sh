#!/usr/bin/env bash
# fp4lab's main job on its built-in default: installs what the build needs, builds, and runs it.
# Today that is the shrinkage probe (NUMERICS.md §8) over every distribution, grid, scale mode and
# RHT setting; the sweep replaces it once it exists.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FP4LAB_BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
"$build/cli/fp4lab" quant probe
