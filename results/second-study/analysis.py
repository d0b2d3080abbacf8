#!/usr/bin/env python3
"""analysis.py — the second study's pre-registered analysis (PLAN.md, "Endpoints" and "Tests"),
committed with the plan before the first run. Reads the store, prints Markdown; read-only, standard
library only (stats.py beside it).

    python3 results/second-study/analysis.py results/second-study/second-study.db > analysis.md

Units: losses in nats/token; d and gaps in percentage points (pp) of the size's mean BF16 loss.
  L̄_bf16(size)      mean final validation loss of the size's bf16 runs (seeds 0–3)
  gap_r(size)       mean_s L_r,s / L̄_bf16 − 1
  d_AB(size, s)     (L_A,s − L_B,s) / L̄_bf16 · 100: the seed-paired difference (runs of one seed share the
                    initial weights and the data order); below 0, A trains closer to BF16 than B
The same quantities on the paper's metric use T = the mean train loss over the last ceil(steps / 10)
steps of each run (train/loss rows), with T̄_bf16 as the denominator.
"""
import math
import random
import sqlite3
import statistics
import sys

import stats

SIZES = ["d4", "d5", "d6"]
RECIPES = ["bf16", "e2m1", "ufp4", "nvfp4"]
PRIMARY = ("ufp4", "e2m1")
NVFP4_CONTRASTS = [("nvfp4", "e2m1"), ("nvfp4", "ufp4")]
PAPER_DENSE_1P5B = {"e2m1": 1.2570, "ufp4": 0.9673}     # gaps in %, mean of the last 1000 steps
BOOTSTRAP = 10000
SEED = 0


def load(path):
    store = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    runs = {}
    for rid, recipe, model, n, tokens, seed, state, value, is_nan in store.execute(
            "SELECT id, recipe, model, n_params_nonembedding, tokens, seed, state, final_loss, final_is_nan "
            "FROM final_losses"):
        runs[(model, recipe, seed)] = {"id": rid, "n": n, "tokens": tokens, "state": state,
                                       "final": None if is_nan else value}
    # Runs with no eval row at all (not started, or failed before one) are listed by state only.
    states = {}
    for model, recipe, seed, state in store.execute("SELECT model, recipe, seed, state FROM runs"):
        states[(model, recipe, seed)] = state
    for key, run in runs.items():
        rows = store.execute("SELECT step, value, is_nan FROM metrics WHERE run = ? AND key = 'train/loss' "
                             "ORDER BY step", (run["id"],)).fetchall()
        run["train_tail"] = None
        if rows and run["state"] == "succeeded":
            k = math.ceil(len(rows) / 10)
            tail = rows[-k:]
            if not any(is_nan for _, _, is_nan in tail):
                run["train_tail"] = statistics.fmean(v for _, v, _ in tail)
                run["tail_steps"] = k
    return runs, states


def usable(run, metric):
    return run is not None and run["state"] == "succeeded" and run[metric] is not None


def seeds_of(runs, size, recipe, metric):
    return {s: r[metric] for (m, rc, s), r in runs.items() if m == size and rc == recipe and usable(r, metric)}


def fmt_p(p):
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


def contrast(runs, size, a, b, metric):
    """The seed-paired d of a − b at one size, or None when fewer than two pairs exist."""
    base = seeds_of(runs, size, "bf16", metric)
    la, lb = seeds_of(runs, size, a, metric), seeds_of(runs, size, b, metric)
    if not base:
        return None
    scale = 100.0 / statistics.fmean(base.values())
    common = sorted(set(la) & set(lb))
    d = [scale * (la[s] - lb[s]) for s in common]
    if len(d) < 2:
        return None
    r = stats.paired_t(d)
    r["p_flip"], r["flip_method"] = stats.sign_flip_p(d, SEED)
    r["wins"] = sum(x < 0 for x in d)
    r["d"] = d
    r["seeds"] = common
    return r


def gap_interval(runs, size, recipe, metric):
    """gap = mean L_r / mean L_bf16 − 1 with a percentile bootstrap interval that resamples the recipe's
    seeds and the bf16 seeds independently (BOOTSTRAP replicates, seeded)."""
    base = list(seeds_of(runs, size, "bf16", metric).values())
    vals = list(seeds_of(runs, size, recipe, metric).values())
    if not base or not vals:
        return None
    gap = 100.0 * (statistics.fmean(vals) / statistics.fmean(base) - 1.0)
    rng = random.Random(SEED)
    reps = sorted(100.0 * (statistics.fmean(rng.choices(vals, k=len(vals))) /
                           statistics.fmean(rng.choices(base, k=len(base))) - 1.0) for _ in range(BOOTSTRAP))
    sd = 100.0 * statistics.stdev(vals) / statistics.fmean(vals) if len(vals) > 1 else float("nan")
    return {"gap": gap, "lo": stats.percentile(reps, 0.025), "hi": stats.percentile(reps, 0.975),
            "seeds": len(vals), "seed_sd_pct": sd}


def verdict(r):
    if r["hi"] < 0 and r["p_flip"] < 0.05:
        return "confirms the direction of claim 3 (UFP4 closer to BF16)"
    if r["lo"] > 0 and r["p_flip"] < 0.05:
        return "contradicts claim 3 (UFP4 further from BF16)"
    extra = (" ; an effect as large as the paper's −0.29 pp is excluded" if r["lo"] > -0.29 else
             " ; an effect as large as the paper's −0.29 pp is not excluded")
    return "not resolved (the interval contains 0)" + extra


def section_runs(runs, states):
    print("## Runs\n")
    print("| size | recipe | succeeded | diverged | failed | other |")
    print("|---|---|---:|---:|---:|---:|")
    for size in SIZES:
        for recipe in RECIPES:
            st = [v for (m, r, s), v in states.items() if m == size and r == recipe]
            if not st:
                continue
            c = {k: st.count(k) for k in ("succeeded", "diverged", "failed")}
            print(f"| {size} | {recipe} | {c['succeeded']} | {c['diverged']} | {c['failed']} | "
                  f"{len(st) - sum(c.values())} |")
    print()


def section_gaps(runs, metric, label):
    print(f"## BF16-relative gaps ({label})\n")
    print("gap = mean L_r / mean L_bf16 − 1 over the seeds run; 95% percentile bootstrap over seeds "
          f"({BOOTSTRAP} replicates, recipe and bf16 seeds resampled independently); seed sd in % of the mean.\n")
    print("| size | recipe | seeds | mean loss | seed sd | gap | 95% interval |")
    print("|---|---|---:|---:|---:|---:|---|")
    for size in SIZES:
        base = seeds_of(runs, size, "bf16", metric)
        if base:
            v = list(base.values())
            sd = 100.0 * statistics.stdev(v) / statistics.fmean(v) if len(v) > 1 else float("nan")
            print(f"| {size} | bf16 | {len(v)} | {statistics.fmean(v):.4f} | {sd:.2f}% | — | — |")
        for recipe in RECIPES[1:]:
            g = gap_interval(runs, size, recipe, metric)
            if g:
                v = list(seeds_of(runs, size, recipe, metric).values())
                print(f"| {size} | {recipe} | {g['seeds']} | {statistics.fmean(v):.4f} | {g['seed_sd_pct']:.2f}% | "
                      f"{g['gap']:+.3f}% | [{g['lo']:+.3f}, {g['hi']:+.3f}] |")
    print()


def contrast_family(runs, pairs, metric, title, note):
    print(f"## {title}\n")
    print(note + "\n")
    rows = []
    for a, b in pairs:
        for size in SIZES:
            r = contrast(runs, size, a, b, metric)
            if r:
                rows.append((a, b, size, r))
    adjusted = stats.holm([r["p_flip"] for *_, r in rows]) if rows else []
    print("| A − B | size | seeds | mean d (pp) | sd (pp) | 95% t interval | t p | sign-flip p | Holm p | A closer |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for (a, b, size, r), adj in zip(rows, adjusted):
        print(f"| {a} − {b} | {size} | {r['n']} | {r['mean']:+.3f} | {r['sd']:.3f} | "
              f"[{r['lo']:+.3f}, {r['hi']:+.3f}] | {fmt_p(r['p_t'])} | {fmt_p(r['p_flip'])} | {fmt_p(adj)} | "
              f"{r['wins']} of {r['n']} |")
    print()
    return rows


def section_primary(runs):
    r = contrast(runs, "d4", *PRIMARY, "final")
    print("## Primary endpoint: ufp4 − e2m1 at d4, final validation loss\n")
    if not r:
        print("Not available yet (fewer than two complete pairs, or no bf16 run).\n")
        return
    print(f"- seeds: {r['n']} ({r['seeds'][0]}–{r['seeds'][-1]}); d = {r['mean']:+.3f} pp, sd {r['sd']:.3f} pp, "
          f"standard error {r['se']:.3f} pp")
    print(f"- 95% Student-t interval over seeds: [{r['lo']:+.3f}, {r['hi']:+.3f}] pp; two-sided t-test p = "
          f"{fmt_p(r['p_t'])}; sign-flip p = {fmt_p(r['p_flip'])} ({r['flip_method']})")
    print(f"- UFP4 closer in {r['wins']} of {r['n']} seeds")
    print(f"- paper, dense 1.5B: {PAPER_DENSE_1P5B['ufp4'] - PAPER_DENSE_1P5B['e2m1']:+.2f} pp")
    print(f"- pre-registered reading: **{verdict(r)}**")
    lost = [(s, rc) for (m, rc, s), run in runs.items()
            if m == "d4" and rc in PRIMARY and run["state"] == "diverged"]
    if lost:
        # PLAN.md: a diverged 4-bit run counts as a loss for its recipe in a sign test over all pairs.
        wins = r["wins"] + sum(1 for s, rc in lost if rc == PRIMARY[1])
        losses = (r["n"] - r["wins"]) + sum(1 for s, rc in lost if rc == PRIMARY[0])
        total = wins + losses
        k = min(wins, losses)
        p = min(1.0, 2.0 * sum(math.comb(total, i) for i in range(k + 1)) / 2 ** total)
        print(f"- diverged runs: {', '.join(f'{rc} seed {s}' for s, rc in sorted(lost))}; sensitivity (a diverged "
              f"run loses its pair; two-sided sign test): UFP4 closer in {wins} of {total}, p = {fmt_p(p)}")
    print()


def section_trend(runs, metric):
    print("## Trend of ufp4 − e2m1 with log10 N\n")
    print("Weighted least squares over the sizes' mean d (weights 1/SE², SEs taken as known; normal 95% "
          "interval); the unweighted slope beside it; leave-one-size-out slopes; a bootstrap resampling seeds "
          f"within each size ({BOOTSTRAP} replicates). The learning rate (0.384/d_model) and the token count "
          "(20·N) move with N along this axis. Three sizes: a descriptive trend, not a law.\n")
    pts = []
    for size in SIZES:
        r = contrast(runs, size, *PRIMARY, metric)
        if r:
            n = next(run["n"] for (m, rc, s), run in runs.items() if m == size)
            pts.append((size, math.log10(n), r))
    if len(pts) < 2:
        print("Not available yet (fewer than two sizes).\n")
        return
    x = [p[1] for p in pts]
    y = [p[2]["mean"] for p in pts]
    se = [p[2]["se"] for p in pts]
    w = stats.weighted_slope(x, y, se)
    print(f"- weighted slope: {w['slope']:+.3f} pp per tenfold N, 95% [{w['lo']:+.3f}, {w['hi']:+.3f}]; "
          f"unweighted: {stats.ols_slope(x, y):+.3f}")
    rng = random.Random(SEED)
    reps = []
    for _ in range(BOOTSTRAP):
        ys, ses = [], []
        for _, _, r in pts:
            sample = rng.choices(r["d"], k=len(r["d"]))
            ys.append(statistics.fmean(sample))
            ses.append(max(statistics.stdev(sample), 1e-9) / math.sqrt(len(sample)))
        reps.append(stats.weighted_slope(x, ys, ses)["slope"])
    reps.sort()
    print(f"- seed bootstrap of the weighted slope: 95% [{stats.percentile(reps, 0.025):+.3f}, "
          f"{stats.percentile(reps, 0.975):+.3f}]")
    if len(pts) >= 3:
        for i, (size, _, _) in enumerate(pts):
            keep = [j for j in range(len(pts)) if j != i]
            s = stats.weighted_slope([x[j] for j in keep], [y[j] for j in keep], [se[j] for j in keep])["slope"]
            print(f"- without {size}: {s:+.3f} pp per tenfold N")
    print()


def section_variance(runs):
    print("## Variance decomposition of ufp4 − e2m1 (final loss)\n")
    print("Per size, over the seeds with both recipes: the seed sd of each recipe's gap, their correlation, "
          "the sd of d, and the share of the unpaired variance that pairing by seed removes "
          "(1 − var d / (var gap_ufp4 + var gap_e2m1)).\n")
    print("| size | pairs | sd gap ufp4 (pp) | sd gap e2m1 (pp) | correlation | sd d (pp) | removed by pairing |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for size in SIZES:
        base = seeds_of(runs, size, "bf16", "final")
        u, e = seeds_of(runs, size, "ufp4", "final"), seeds_of(runs, size, "e2m1", "final")
        common = sorted(set(u) & set(e))
        if not base or len(common) < 3:
            continue
        scale = 100.0 / statistics.fmean(base.values())
        gu = [scale * u[s] for s in common]
        ge = [scale * e[s] for s in common]
        vu, ve = statistics.variance(gu), statistics.variance(ge)
        cov = statistics.covariance(gu, ge)
        vd = statistics.variance([a - b for a, b in zip(gu, ge)])
        print(f"| {size} | {len(common)} | {math.sqrt(vu):.3f} | {math.sqrt(ve):.3f} | "
              f"{cov / math.sqrt(vu * ve):+.3f} | {math.sqrt(vd):.3f} | {100.0 * (1 - vd / (vu + ve)):.0f}% |")
    print()


def section_ratio(runs):
    print("## Relative effect: gap_ufp4 / gap_e2m1 (final loss)\n")
    print("The paper's ratios: dense 1.5B 0.770, MoE 7.9B 0.783, MoE 124B 0.801. Percentile bootstrap over "
          f"seeds ({BOOTSTRAP} replicates; the seeds with both recipes resampled as pairs, bf16 seeds "
          "independently). Exploratory.\n")
    print("| size | pairs | ratio | 95% interval |")
    print("|---|---:|---:|---|")
    for size in SIZES:
        base = list(seeds_of(runs, size, "bf16", "final").values())
        u, e = seeds_of(runs, size, "ufp4", "final"), seeds_of(runs, size, "e2m1", "final")
        common = sorted(set(u) & set(e))
        if not base or len(common) < 2:
            continue

        def ratio(seeds, b):
            mb = statistics.fmean(b)
            gu = statistics.fmean(u[s] for s in seeds) / mb - 1
            ge = statistics.fmean(e[s] for s in seeds) / mb - 1
            return gu / ge if ge != 0 else float("nan")

        rng = random.Random(SEED)
        reps = sorted(x for x in (ratio(rng.choices(common, k=len(common)), rng.choices(base, k=len(base)))
                                  for _ in range(BOOTSTRAP)) if not math.isnan(x))
        print(f"| {size} | {len(common)} | {ratio(common, base):.3f} | "
              f"[{stats.percentile(reps, 0.025):.3f}, {stats.percentile(reps, 0.975):.3f}] |")
    print()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: analysis.py STORE.db")
    runs, states = load(sys.argv[1])
    print("# The second study: pre-registered analysis (analysis.py)\n")
    section_runs(runs, states)
    section_primary(runs)
    contrast_family(runs, [PRIMARY], "final", "Family A: ufp4 − e2m1 at every size (final validation loss)",
                    "Holm's adjustment across the three sizes; sign-flip p exact up to 20 seeds, Monte Carlo above.")
    contrast_family(runs, NVFP4_CONTRASTS, "final", "Family B: nvfp4 against e2m1 and ufp4 (final validation loss)",
                    "Holm across the six tests. With 4 seeds the smallest sign-flip p is 0.125: those contrasts "
                    "cannot reach 0.05 and are read from their intervals.")
    contrast_family(runs, [PRIMARY], "train_tail",
                    "Family C: ufp4 − e2m1 on the paper's metric (mean train loss, last 10% of steps)",
                    "Holm across the three sizes; denominator the size's mean bf16 train metric.")
    section_gaps(runs, "final", "final validation loss")
    section_gaps(runs, "train_tail", "the paper's metric: mean train loss over the last 10% of steps")
    section_trend(runs, "final")
    section_variance(runs)
    section_ratio(runs)


if __name__ == "__main__":
    main()
