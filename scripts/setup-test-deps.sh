#!/usr/bin/env bash
# Installs the Debian 12 packages that only the tests use: a single-node Slurm (slurm-wlm and
# munge) for tests/slurm/real_slurm.sh, Chromium for the report's browser test
# (tests/test_report_browser.cpp), and Python 3 for the second study's analysis scripts
# (results/second-study/test_*.py). Idempotent; best effort: when the packages cannot be
# installed (no root, no network), it says so and returns 0, and those tests report "skipped" with
# the reason. The daemons are never started here (and not as services): the test starts its own.
set -uo pipefail
packages=(slurm-wlm munge chromium python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-test-deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1 || ! sudo -n true 2>/dev/null; then
    echo "setup-test-deps: not root and no sudo: ${missing[*]} not installed (the tests that need them will skip)"
    exit 0
  fi
  sudo_cmd=(sudo -n)
fi
echo "setup-test-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Installing must not start the packages' services: the test runs its own daemons on its own ports.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null && "${sudo_cmd[@]}" chmod 755 "$policy" &&
    added_policy=1
fi
if "${sudo_cmd[@]}" apt-get update -qq && "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  echo "setup-test-deps: done"
else
  echo "setup-test-deps: could not install ${missing[*]} (the tests that need them will skip)"
fi
[ $added_policy -eq 1 ] && "${sudo_cmd[@]}" rm -f "$policy"
exit 0
