#!/usr/bin/env bash
# Installs the Debian 12 packages fp4lab's build and tests need. Idempotent and non-interactive:
# packages already present are skipped, and apt is not touched at all when nothing is missing.
# The CUDA toolkit is found by CMake, never installed here (a CPU-only build works without it).
# gnuplot-nox draws the figures of `fp4lab report` (a child process, not a library); libxml2 and
# libpng let the report tests read the SVG, HTML and screenshots it makes.
set -euo pipefail
packages=(
  cmake ninja-build g++ make pkg-config git xz-utils
  libsqlite3-dev sqlite3 libtomlplusplus-dev libcli11-dev catch2
  libceres-dev libeigen3-dev nlohmann-json3-dev libfmt-dev libssl-dev
  gnuplot-nox libxml2-dev libpng-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "setup-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup-deps: done"
