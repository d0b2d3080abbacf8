#!/usr/bin/env python3
"""interim.py — the second study's pre-registered interim rule (PLAN.md, "Interim rule"), applied
mechanically to the store once seeds 0–15 of e2m1 and ufp4 at d4 have ended.

It reads the final validation losses of those 32 runs and the d4 bf16 runs, computes the seed-paired
differences d = (L_ufp4 − L_e2m1) / mean L_bf16 (percentage points), and prints ONLY their sample
standard deviation and the seed count the rule gives:

    n = min(64, max(48, ceil((sd / 0.1 pp)²)))

It never prints, stores or returns the mean of d (the rule must not see it). With --write it also
writes d4-pairs-extension.toml for seeds 48..n−1 when n > 48 (from d4-pairs-more.toml, changing the
seed list and the comment only). Exit 2 if the 16 seeds have not all ended.

    python3 results/second-study/interim.py results/second-study/second-study.db [--write]
"""
import math
import pathlib
import re
import sqlite3
import statistics
import sys

import stats

INTERIM_SEEDS = range(16)
TARGET_SE_PP = 0.1
FLOOR, CAP = 48, 64


def main():
    args = [a for a in sys.argv[1:] if a != "--write"]
    if len(args) != 1:
        sys.exit("usage: interim.py STORE.db [--write]")
    store = sqlite3.connect(f"file:{args[0]}?mode=ro", uri=True)
    rows = store.execute(
        "SELECT recipe, seed, state, final_loss, final_is_nan FROM final_losses "
        "WHERE model = 'd4' AND recipe IN ('bf16', 'e2m1', 'ufp4')").fetchall()
    loss = {}
    ended = set()
    for recipe, seed, state, value, is_nan in rows:
        if state in ("succeeded", "diverged"):
            ended.add((recipe, seed))
        if state == "succeeded" and not is_nan:
            loss[(recipe, seed)] = value
    missing = [(r, s) for s in INTERIM_SEEDS for r in ("e2m1", "ufp4") if (r, s) not in ended]
    if missing:
        print(f"interim.py: {len(missing)} of the 32 interim runs have not ended yet "
              f"(first: {missing[0][0]} seed {missing[0][1]})", file=sys.stderr)
        sys.exit(2)
    bf16 = [v for (r, s), v in loss.items() if r == "bf16"]
    if not bf16:
        sys.exit("interim.py: no succeeded d4 bf16 run: the denominator is missing")
    scale = 100.0 / statistics.fmean(bf16)
    d = [scale * (loss[("ufp4", s)] - loss[("e2m1", s)]) for s in INTERIM_SEEDS
         if ("ufp4", s) in loss and ("e2m1", s) in loss]
    pairs_lost = len(INTERIM_SEEDS) - len(d)
    if len(d) < 2:
        sys.exit("interim.py: fewer than two complete pairs: the rule cannot be applied")
    sd = statistics.stdev(d)
    n = stats.seeds_for_se(sd, TARGET_SE_PP, FLOOR, CAP)
    print(f"interim rule (PLAN.md): {len(d)} complete pairs of seeds 0-15 ({pairs_lost} with a diverged run), "
          f"sd of d = {sd:.4f} pp; seeds for a standard error of {TARGET_SE_PP} pp: "
          f"ceil((sd/{TARGET_SE_PP})^2) = {math.ceil((sd / TARGET_SE_PP) ** 2 - 1e-9)}; "
          f"n = min({CAP}, max({FLOOR}, that)) = {n}")
    if "--write" in sys.argv[1:]:
        here = pathlib.Path(__file__).resolve().parent
        out = here / "d4-pairs-extension.toml"
        if n <= FLOOR:
            print("interim.py: n = 48: no extension grid")
            return
        text = (here / "d4-pairs-more.toml").read_text()
        text = re.sub(r"^seed = \[.*\]$", "seed = [" + ", ".join(str(s) for s in range(FLOOR, n)) + "]",
                      text, count=1, flags=re.M)
        first, rest = text.split("\n", 1)
        text = (f"# Leg d4, part 5 (PLAN.md): e2m1 and ufp4 × seeds {FLOOR}–{n - 1}, written by interim.py "
                f"from the interim rule (sd of d over seeds 0–15 = {sd:.4f} pp -> n = {n}).\n" + rest)
        tmp = out.with_suffix(".toml.tmp")
        tmp.write_text(text)
        tmp.replace(out)
        print(f"interim.py: wrote {out.name} (seeds {FLOOR}-{n - 1})")


if __name__ == "__main__":
    main()
