#!/usr/bin/env python3
"""paired.py — the recipe-against-recipe differences of the first study over SEEDS.

Superseded by `fp4lab fit study.toml` (its paired contrasts over every seed, with exact sign-flip
and Holm-adjusted p-values: docs/statistics.md) and the report's "Recipe against recipe"
(paired_contrasts.csv). Kept because the README quotes one number only it computes: d2's three
token counts pooled into one interval (seed × D pairs as the unit), which fp4lab does not pool.

The noise-floor, ablation and d6-seeds grids add seeds at some points. This prints, for every grid point with two or more seeds of both recipes and their BF16 twin, and
pooled over the D values of one size, the paired difference of gaps

    d = gap_A - gap_B = (L_A - L_B) / L_bf16      (percentage points; below 0: A closer to BF16)

per seed (the runs of one seed share initial weights and batches), its mean, sample sd and 95%
Student-t interval over the seeds (or over the seed x D pairs when pooled), and how many of them A
wins. Read-only; standard library only.

    python3 results/first-study/paired.py results/first-study/first-study.db > paired.md
"""
import math
import sqlite3
import statistics
import sys

# Two-sided 95% quantiles of Student's t by degrees of freedom (df > 30: the normal's 1.96 is
# within 2% of them and is used).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
        17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
        25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}

PAIRS = [("ufp4", "e2m1"), ("ufp4", "nvfp4"), ("nvfp4", "e2m1")]


def interval(values):
    n = len(values)
    mean = statistics.fmean(values)
    sd = statistics.stdev(values)
    half = T975.get(n - 1, 1.96) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: paired.py STORE.db")
    store = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
    # Runs are matched by match_key (equal for runs that differ only in their recipe: same model,
    # tokens, seed, data and training settings), so the main grid's runs and the probe grid's
    # (other eval and probe settings) never pair up by accident.
    loss = {}
    meta = {}
    for key, recipe, model, n, tokens, seed, value in store.execute(
            "SELECT match_key, recipe, model, n_params_nonembedding, tokens, seed, final_loss "
            "FROM final_losses WHERE state = 'succeeded' AND NOT final_is_nan"):
        loss[(key, recipe)] = value
        meta[key] = (model, n, tokens, seed)

    def diffs(keys, a, b):
        return [100.0 * (loss[(k, a)] - loss[(k, b)]) / loss[(k, "bf16")]
                for k in keys if (k, a) in loss and (k, b) in loss and (k, "bf16") in loss]

    # Grid points: (model, tokens) -> the match keys of its seeds. A point counts only where the
    # runs of several seeds exist (the main grid alone has one per point).
    points = {}
    for key, (model, n, tokens, seed) in meta.items():
        points.setdefault((n, model, tokens), []).append(key)

    print("| A − B | model | D | seeds | d per seed (pp) | mean ± sd (pp) | 95% interval | A wins |")
    print("|---|---|---|---:|---|---:|---|---:|")
    for a, b in PAIRS:
        by_model = {}
        for (n, model, tokens), keys in sorted(points.items()):
            keys = sorted(keys, key=lambda k: meta[k][3])
            d = diffs(keys, a, b)
            if len(d) < 2:
                continue
            by_model.setdefault((n, model), []).append((tokens, d))
            mean, sd, lo, hi = interval(d)
            print(f"| {a} − {b} | {model} | {tokens / 1e6:.1f}M | {len(d)} | "
                  f"{', '.join(f'{x:+.2f}' for x in d)} | {mean:+.2f} ± {sd:.2f} | "
                  f"[{lo:+.2f}, {hi:+.2f}] | {sum(x < 0 for x in d)} of {len(d)} |")
        for (n, model), rows in sorted(by_model.items()):
            if len(rows) < 2:
                continue
            d = [x for _, row in rows for x in row]
            mean, sd, lo, hi = interval(d)
            print(f"| {a} − {b} | {model} | all {len(rows)} D, pooled | {len(d)} | | "
                  f"{mean:+.2f} ± {sd:.2f} | [{lo:+.2f}, {hi:+.2f}] | {sum(x < 0 for x in d)} of {len(d)} |")


if __name__ == "__main__":
    main()
