"""stats.py — the statistics the second study's analysis uses (PLAN.md, "Tests"), standard library only.

Every function is deterministic: the resampling ones take an explicit seed. Checked by
test_stats.py beside this file against hand-computed and tabulated values.
"""
import itertools
import math
import random
import statistics


def _betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            return h
    raise ArithmeticError("incomplete beta: continued fraction did not converge")


def betainc(a, b, x):
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf_two_sided(t, df):
    """P(|T| >= |t|) for Student's t with df degrees of freedom."""
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p, df):
    """The p-quantile (p > 0.5) of Student's t, by bisection on the two-sided tail."""
    if not 0.5 < p < 1.0:
        raise ValueError("t_quantile takes 0.5 < p < 1")
    tail = 2.0 * (1.0 - p)
    lo, hi = 0.0, 1.0
    while t_sf_two_sided(hi, df) > tail:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_sf_two_sided(mid, df) > tail:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def paired_t(d, level=0.95):
    """Mean of the paired differences d, their sd, the standard error, the Student-t interval at
    `level` and the two-sided t-test p-value against 0 (n >= 2)."""
    n = len(d)
    if n < 2:
        raise ValueError("a paired interval needs at least two pairs")
    mean = statistics.fmean(d)
    sd = statistics.stdev(d)
    se = sd / math.sqrt(n)
    half = t_quantile(0.5 + level / 2.0, n - 1) * se
    p = t_sf_two_sided(mean / se, n - 1) if se > 0 else (0.0 if mean != 0 else 1.0)
    return {"n": n, "mean": mean, "sd": sd, "se": se, "lo": mean - half, "hi": mean + half, "p_t": p}


EXACT_UP_TO = 20          # 2^20 sign vectors: enumerated exactly
MONTE_CARLO_DRAWS = 200000


def sign_flip_p(d, seed=0):
    """Two-sided sign-flip (paired permutation) p-value of H0: the differences are symmetric about 0,
    statistic |sum d|. Exact over all 2^n sign vectors for n <= EXACT_UP_TO (the observed vector is
    one of them, so p >= 2 / 2^n); above, Monte Carlo with MONTE_CARLO_DRAWS seeded draws and the
    (1 + hits) / (1 + draws) estimate, which is itself a valid p-value (Phipson & Smyth 2010).
    Returns (p, method)."""
    n = len(d)
    observed = abs(sum(d))
    # A tolerance for sums equal to the observed one up to rounding (ties count as extreme).
    eps = 1e-12 * max(1.0, sum(abs(x) for x in d))
    if n <= EXACT_UP_TO:
        hits = 0
        for signs in itertools.product((1.0, -1.0), repeat=n):
            if abs(sum(s * x for s, x in zip(signs, d))) >= observed - eps:
                hits += 1
        return hits / 2 ** n, "exact"
    rng = random.Random(seed)
    hits = 0
    for _ in range(MONTE_CARLO_DRAWS):
        bits = rng.getrandbits(n)
        s = 0.0
        for i, x in enumerate(d):
            s += -x if (bits >> i) & 1 else x
        if abs(s) >= observed - eps:
            hits += 1
    return (1 + hits) / (1 + MONTE_CARLO_DRAWS), f"Monte Carlo, {MONTE_CARLO_DRAWS} draws"


def holm(pvalues):
    """Holm's step-down adjusted p-values, in the order given (family-wise error control)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def percentile(sorted_values, q):
    """The q-quantile (0..1) of sorted values, linear interpolation between order statistics."""
    if not sorted_values:
        raise ValueError("percentile of nothing")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def weighted_slope(x, y, se):
    """Weighted least-squares line y = a + b·x with weights 1/se² (the points' variances taken as
    known): slope b, its standard error and the normal 95% interval."""
    w = [1.0 / (s * s) for s in se]
    sw = sum(w)
    xbar = sum(wi * xi for wi, xi in zip(w, x)) / sw
    ybar = sum(wi * yi for wi, yi in zip(w, y)) / sw
    sxx = sum(wi * (xi - xbar) ** 2 for wi, xi in zip(w, x))
    b = sum(wi * (xi - xbar) * (yi - ybar) for wi, xi, yi in zip(w, x, y)) / sxx
    se_b = math.sqrt(1.0 / sxx)
    return {"slope": b, "intercept": ybar - b * xbar, "se": se_b, "lo": b - 1.959963984540054 * se_b,
            "hi": b + 1.959963984540054 * se_b}


def ols_slope(x, y):
    """Unweighted least-squares slope (for contrast with the weighted one)."""
    xbar, ybar = statistics.fmean(x), statistics.fmean(y)
    return sum((a - xbar) * (b - ybar) for a, b in zip(x, y)) / sum((a - xbar) ** 2 for a in x)


def seeds_for_se(sd, target_se, floor, cap):
    """The interim rule's seed count: ceil((sd / target_se)²), never below floor, never above cap."""
    need = math.ceil((sd / target_se) ** 2 - 1e-9)
    return min(cap, max(floor, need))
