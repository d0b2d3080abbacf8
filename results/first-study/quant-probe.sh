#!/usr/bin/env bash
# quant-probe.sh — the tensor-level half of SCIENCE.md claims 1, 2 and 5 (does E2M1 shrink values
# toward zero under round-to-nearest, does the uniform grid not, what does the RHT do to each, and
# what clipping E2M1's maximum does), with intervals over seeds rather than one draw.
#
#   results/first-study/quant-probe.sh FP4LAB [SEEDS] > results/first-study/quant-probe.md
#
# Runs `fp4lab quant probe` (1024×4096 samples per distribution, NUMERICS.md §8's alpha, shrink and
# nmse) for seeds 0 .. SEEDS-1 (default 8) on the Gaussian, Laplace and Student-t (ν = 3)
# distributions, the grids e2m1, e1m2 and e2m1 clipped to 2, 3 and 4, the recipes' scale modes
# (fp32 1×16 as ufp4 and e2m1 use, e4m3x2 as nvfp4 uses), RHT off and on; prints a Markdown table
# of the mean over seeds with a Student-t 95% interval. CPU only, about 15 s per seed.
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
fp4lab=$1 seeds=${2:-8}
case "$seeds" in
  ''|*[!0-9]*|0|1) echo "quant-probe: SEEDS must be a whole number of at least 2, got '$seeds'" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((s = 0; s < seeds; s++)); do
  "$fp4lab" quant probe --dist gaussian,laplace,student-t --grid e2m1,e1m2,e2m1:2,e2m1:3,e2m1:4 \
    --scale fp32,e4m3x2 --seed "$s" --format csv --table sweep > "$tmp/seed$s.csv"
  echo "quant-probe: seed $s of $seeds done" >&2
done
python3 - "$tmp" "$seeds" <<'PY'
import csv, glob, math, statistics, sys
from collections import defaultdict

# Two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom; beyond, the normal's.
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042]
rows = defaultdict(lambda: defaultdict(list))
for path in sorted(glob.glob(sys.argv[1] + "/seed*.csv")):
    for r in csv.DictReader(open(path)):
        key = (r["dist"], r["grid"], r["scale"], r["rht"])
        for m in ("alpha", "shrink", "nmse"):
            rows[key][m].append(float(r[m]))

def mean_half_width(v):
    t = T975[len(v) - 2] if len(v) - 1 <= len(T975) else 1.960
    return statistics.mean(v), t * statistics.stdev(v) / math.sqrt(len(v))

print(f"# fp4lab quant probe over {sys.argv[2]} seeds: mean and 95% interval (Student t over seeds)")
print()
print("alpha = <Q(A), A>/<A, A> (below 1: shrinkage toward zero); shrink = (sum|Q(A)| - sum|A|)/sum|A|;")
print("nmse = |Q(A) - A|^2/|A|^2. 1024x4096 samples per seed, blocks of 16 along rows, round to nearest.")
print()
print("| distribution | grid | scale | RHT | alpha | shrink | nmse |")
print("|---|---|---|---|---|---|---|")
for key, m in rows.items():
    a, ah = mean_half_width(m["alpha"])
    s, sh = mean_half_width(m["shrink"])
    n, _ = mean_half_width(m["nmse"])
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {a:.5f} ± {ah:.5f} | {s:+.5f} ± {sh:.5f} | {n:.3e} |")
PY
