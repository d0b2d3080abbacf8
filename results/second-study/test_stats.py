"""test_stats.py — known answers for stats.py: python3 results/second-study/test_stats.py (exit 1 on a failure)."""
import math
import sys

import stats

failures = []


def check(name, got, want, tol):
    if not abs(got - want) <= tol:
        failures.append(f"{name}: got {got!r}, want {want!r} (tolerance {tol})")


# Student-t quantiles (tables: e.g. Abramowitz & Stegun 26.10).
check("t 0.975 df1", stats.t_quantile(0.975, 1), 12.7062, 1e-3)
check("t 0.975 df3", stats.t_quantile(0.975, 3), 3.18245, 1e-4)
check("t 0.975 df15", stats.t_quantile(0.975, 15), 2.13145, 1e-4)
check("t 0.975 df47", stats.t_quantile(0.975, 47), 2.01174, 1e-4)
check("t 0.995 df10", stats.t_quantile(0.995, 10), 3.16927, 1e-4)
# df = 1 is the Cauchy distribution: P(|T| >= 1) = 1/2.
check("t tail df1", stats.t_sf_two_sided(1.0, 1), 0.5, 1e-12)
# df = 2: P(|T| >= t) = 1 - t / sqrt(2 + t²).
check("t tail df2", stats.t_sf_two_sided(1.5, 2), 1 - 1.5 / math.sqrt(2 + 2.25), 1e-12)

# Paired t on a hand-worked sample: d = 1, 2, 3, 4 -> mean 2.5, sd sqrt(5/3), se sd/2, t = 3.873.
r = stats.paired_t([1.0, 2.0, 3.0, 4.0])
check("paired mean", r["mean"], 2.5, 1e-12)
check("paired sd", r["sd"], math.sqrt(5.0 / 3.0), 1e-12)
check("paired half", r["hi"] - r["mean"], 3.18245 * math.sqrt(5.0 / 3.0) / 2.0, 1e-4)
check("paired p", r["p_t"], 0.030466, 1e-5)

# Sign flip, exact: all four differences positive -> only the all-plus and all-minus vectors reach
# the observed |sum|: p = 2/16.
p, method = stats.sign_flip_p([1.0, 2.0, 3.0, 4.0])
check("sign-flip exact all positive", p, 2.0 / 16.0, 0.0)
# d = 1, 2, 3, -4: |sum| = 2; sign vectors with |sum| >= 2: enumerate by hand = 10 of 16.
p, _ = stats.sign_flip_p([1.0, 2.0, 3.0, -4.0])
sums = [abs(a * 1 + b * 2 + c * 3 + e * 4) for a in (1, -1) for b in (1, -1) for c in (1, -1) for e in (1, -1)]
check("sign-flip exact mixed", p, sum(s >= 2 for s in sums) / 16.0, 0.0)
# Monte Carlo above 20 pairs: 30 equal positive differences -> exact p = 2/2^30; the estimate is
# (1 + hits)/(1 + draws) with hits ~ 0, so about 1/(draws + 1).
p, method = stats.sign_flip_p([1.0] * 30)
check("sign-flip Monte Carlo floor", p, 1.0 / (stats.MONTE_CARLO_DRAWS + 1), 2e-5)
# Monte Carlo on a null-looking sample agrees with the t-test roughly (both near 1).
p, _ = stats.sign_flip_p([(-1.0) ** i * (1 + i % 3) for i in range(24)])
check("sign-flip Monte Carlo null", p, 1.0, 0.05)

# Holm against a worked example: p = 0.01, 0.04, 0.03 (m = 3): sorted 0.01*3 = 0.03, 0.03*2 = 0.06,
# 0.04*1 = 0.04 -> monotone 0.06; adjusted in the given order 0.03, 0.06, 0.06.
adj = stats.holm([0.01, 0.04, 0.03])
for got, want in zip(adj, [0.03, 0.06, 0.06]):
    check("holm", got, want, 1e-12)

# Weighted slope recovers a known line exactly, and weights matter on a heteroscedastic set.
w = stats.weighted_slope([0.0, 1.0, 2.0], [1.0, 3.0, 5.0], [0.1, 0.1, 0.1])
check("wls slope", w["slope"], 2.0, 1e-12)
check("wls se", w["se"], math.sqrt(1.0 / (100.0 * 2.0)), 1e-12)
w = stats.weighted_slope([0.0, 1.0, 2.0], [0.0, 1.0, 10.0], [0.01, 0.01, 100.0])
check("wls down-weights the noisy point", w["slope"], 1.0, 1e-3)
check("ols does not", stats.ols_slope([0.0, 1.0, 2.0], [0.0, 1.0, 10.0]), 5.0, 1e-12)

# The interim rule: sd 0.86 pp at a target SE of 0.1 pp needs 74 seeds: capped at 64; sd 0.5 needs 25:
# raised to the floor of 48.
check("interim cap", stats.seeds_for_se(0.86, 0.1, 48, 64), 64, 0)
check("interim floor", stats.seeds_for_se(0.5, 0.1, 48, 64), 48, 0)
check("interim between", stats.seeds_for_se(0.75, 0.1, 48, 64), 57, 0)
check("interim exact square", stats.seeds_for_se(0.7, 0.1, 16, 64), 49, 0)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("stats.py: all checks passed")
