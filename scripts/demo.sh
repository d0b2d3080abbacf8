#!/usr/bin/env bash
# fp4lab's main job on its built-in default: installs what the build needs, builds the fp4lab
# executable without the CUDA backend into build-demo/ (only what the main job needs: it trains on
# the CPU, and the CUDA kernels are most of a full build's time on two cores; scripts/test.sh builds
# everything into build/) as a unity build (each target's sources compiled as a few combined files:
# half the build's time on two cores; a ctest holds it to the regular build's bits), runs the default study
# (scripts/demo-study.toml: four tiny model sizes × three lengths × bf16, e2m1, ufp4 on a
# synthetic source of known entropy rate, on the CPU) as a sweep in demo/, prints its status with
# the BF16-relative gap of each 4-bit run, fits the scaling laws with 95% bootstrap intervals, and
# ends by writing the study's report with the fitted curves and each law's E beside the source's
# entropy rate (demo/demo-report/report.html, docs/report.md) and printing its path. Running it again finishes whatever an interruption left and repeats nothing (the sweep
# is idempotent; the fit is stored and reprinted while the runs are unchanged).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FP4LAB_BUILD_DIR:-$root/build-demo}
FP4LAB_BUILD_DIR="$build" FP4LAB_BUILD_TARGETS=fp4lab "$root/scripts/build.sh" -DFP4LAB_CUDA=OFF -DCMAKE_UNITY_BUILD=ON
mkdir -p "$root/demo"
cp "$root/scripts/demo-study.toml" "$root/demo/study.toml"
"$build/cli/fp4lab" sweep run "$root/demo/study.toml"
"$build/cli/fp4lab" sweep status "$root/demo/study.toml"
"$build/cli/fp4lab" fit "$root/demo/study.toml"
echo "report:"
"$build/cli/fp4lab" report "$root/demo/study.toml"
