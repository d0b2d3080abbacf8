#!/usr/bin/env python3
"""The engine-fidelity comparison of bench/fidelity.sh's output, as Markdown tables.

    python3 bench/fidelity_report.py OUTDIR [OUTDIR ...]

Reads every A_s*/metrics.jsonl (fp4lab), B_s*/metrics.jsonl (fp4lab from A's step-1 state with one
weight one ulp off), peer/peer-same-init-s*.jsonl (the PyTorch peer from A's step-1 state) and
peer/peer-s*.jsonl (the peer from its own initial weights), and prints:
  1. per seed: the final eval loss of each, and the pairs' relative differences;
  2. the chaos floor (A vs B) against the implementation difference from the same state
     (A vs peer-same-init), as mean and spread of the relative final differences;
  3. over seeds: fp4lab's mean final loss against the peer's own-init mean, with the difference's
     95% interval (Welch), in % of the peer's mean;
  4. how the same-state pairs part: the median relative train-loss difference at chosen steps.
Standard library only (no numpy), so it runs anywhere.
"""

import glob
import json
import math
import os
import re
import statistics
import sys


def rows(path):
    out = {"train": {}, "eval": {}}
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break
            r = json.loads(line)
            if r.get("kind") in out and r.get("loss") is not None:
                out[r["kind"]][r["step"]] = r["loss"]  # the last row of a step wins (docs/train.md)
    return out


def final(curves):
    return curves["eval"][max(curves["eval"])] if curves["eval"] else None


# Student's t quantile from its CDF (regularized incomplete beta, Lentz's continued fraction).
def _betacf(a, b, x):
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a, b, x):
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1 - x) / b


def t_cdf(t, df):
    p = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return 1 - p if t > 0 else p


def t_quantile(q, df):
    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < q else (lo, mid)
    return (lo + hi) / 2


def mean_interval(xs):
    """Mean and 95% t interval of a sample."""
    n = len(xs)
    m = statistics.fmean(xs)
    if n < 2:
        return m, float("nan"), float("nan")
    half = t_quantile(0.975, n - 1) * statistics.stdev(xs) / math.sqrt(n)
    return m, m - half, m + half


def welch(a, b):
    """Difference of means a - b with its 95% Welch interval, and the t statistic and two-sided p."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(a) - statistics.fmean(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    half = t_quantile(0.975, df) * se
    t = diff / se
    p = 2 * (1 - t_cdf(abs(t), df))
    return diff, diff - half, diff + half, t, df, p


def seed_of(path):
    return int(re.search(r"s(\d+)", os.path.basename(path.rstrip("/").replace("/metrics.jsonl", ""))).group(1))


def main():
    dirs = sys.argv[1:]
    if not dirs:
        sys.exit(__doc__)
    runs = {"A": {}, "B": {}, "same": {}, "peer": {}}
    for d in dirs:
        for p in glob.glob(os.path.join(d, "A_s*", "metrics.jsonl")):
            runs["A"][seed_of(os.path.dirname(p))] = rows(p)
        for p in glob.glob(os.path.join(d, "B_s*", "metrics.jsonl")):
            runs["B"][seed_of(os.path.dirname(p))] = rows(p)
        for p in glob.glob(os.path.join(d, "peer", "peer-same-init-s*.jsonl")):
            runs["same"][seed_of(p)] = rows(p)
        for p in glob.glob(os.path.join(d, "peer", "peer-s*.jsonl")):
            if re.fullmatch(r"peer-s\d+\.jsonl", os.path.basename(p)):  # not peer-same-init-s*
                runs["peer"][seed_of(p)] = rows(p)

    def rel(a, b):
        return 100.0 * (a / b - 1.0)

    print("| seed | fp4lab A | fp4lab B (1 ulp) | B vs A | peer, same state | peer vs A | peer, own init |")
    print("|---|---|---|---|---|---|---|")
    chaos, impl = [], []
    for s in sorted(set(runs["A"]) | set(runs["peer"])):
        a = final(runs["A"][s]) if s in runs["A"] else None
        b = final(runs["B"][s]) if s in runs["B"] else None
        same = final(runs["same"][s]) if s in runs["same"] else None
        own = final(runs["peer"][s]) if s in runs["peer"] else None
        cells = [f"{x:.4f}" if x is not None else "–" for x in (a, b)]
        cells.append(f"{rel(b, a):+.4f}%" if a and b else "–")
        cells.append(f"{same:.4f}" if same else "–")
        cells.append(f"{rel(same, a):+.4f}%" if a and same else "–")
        cells.append(f"{own:.4f}" if own else "–")
        print(f"| {s} | " + " | ".join(cells) + " |")
        if a and b:
            chaos.append(rel(b, a))
        if a and same:
            impl.append(rel(same, a))
    print()
    for label, xs in (("fp4lab vs itself, one ulp apart (B − A)", chaos), ("peer vs fp4lab, same state (peer − A)", impl)):
        if len(xs) >= 2:
            m, lo, hi = mean_interval(xs)
            print(f"- {label}: n = {len(xs)}, mean {m:+.3f}% [{lo:+.3f}, {hi:+.3f}], sd {statistics.stdev(xs):.3f}%, "
                  f"mean |d| {statistics.fmean(abs(x) for x in xs):.3f}%")
    a_final = [final(runs["A"][s]) for s in sorted(runs["A"]) if final(runs["A"][s])]
    p_final = [final(runs["peer"][s]) for s in sorted(runs["peer"]) if final(runs["peer"][s])]
    if len(a_final) >= 2 and len(p_final) >= 2:
        diff, lo, hi, t, df, p = welch(a_final, p_final)
        ref = statistics.fmean(p_final)
        print(f"- over seeds: fp4lab {statistics.fmean(a_final):.4f} (n = {len(a_final)}, sd "
              f"{100 * statistics.stdev(a_final) / statistics.fmean(a_final):.2f}%), peer {ref:.4f} (n = {len(p_final)}, sd "
              f"{100 * statistics.stdev(p_final) / ref:.2f}%): fp4lab − peer = {100 * diff / ref:+.3f}% "
              f"[{100 * lo / ref:+.3f}, {100 * hi / ref:+.3f}] of the peer's mean (Welch t = {t:.2f}, df = {df:.1f}, p = {p:.3f})")
    print()
    steps = sorted({st for c in runs["A"].values() for st in c["train"]})
    marks = [st for st in (2, 3, 5, 10, 20, 50, 100, 200, 300, 400) if st in steps]
    if marks:
        print("| step | median \\|B − A\\| train loss | median \\|peer − A\\| train loss (same state) |")
        print("|---|---|---|")
        for st in marks:
            def med(other):
                xs = [abs(rel(runs[other][s]["train"][st], runs["A"][s]["train"][st]))
                      for s in runs[other] if s in runs["A"] and st in runs[other][s]["train"] and st in runs["A"][s]["train"]]
                return f"{statistics.median(xs):.4f}% (n = {len(xs)})" if xs else "–"
            print(f"| {st} | {med('B')} | {med('same')} |")


if __name__ == "__main__":
    main()
