"""gap_difference.py — the first MoE measurement's primary endpoint (PLAN.md, "Endpoints"): for each
recipe r, the MoE-minus-dense difference of its BF16-relative gap, per seed

    Δ_r(s) = d_{r - bf16}(MoE, s) − d_{r - bf16}(dense, s)      (percentage points)

with d the paired contrast `fp4lab fit` stores (docs/statistics.md: d_s = 100 · (L_r,s − L_bf16,s) /
mean L_bf16 of the point), then its mean, Student-t interval, sign-flip p and Holm over the recipes,
with the second study's stats.py. Run `fp4lab fit study.toml` first: this reads its latest contrast set.

    python3 gap_difference.py [STORE] [--dense d4] [--moe d4-e8k2]
"""
import argparse
import pathlib
import sqlite3
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "second-study"))
import stats  # noqa: E402

PER_SEED = """
WITH d AS (
  SELECT c.recipe, c.model, c.metric, json_extract(j.value, '$[0]') AS seed, json_extract(j.value, '$[1]') AS d_pp
  FROM contrasts AS c, json_each(c.d_json) AS j
  WHERE c.contrast_set = (SELECT max(id) FROM contrast_sets) AND c.against = 'bf16'
)
SELECT moe.metric, moe.recipe, moe.seed, moe.d_pp - dense.d_pp
FROM d AS moe JOIN d AS dense ON dense.metric = moe.metric AND dense.recipe = moe.recipe AND dense.seed = moe.seed
WHERE moe.model = ? AND dense.model = ?
ORDER BY moe.metric, moe.recipe, moe.seed
"""


def refuse(message):
    print(f"gap_difference.py: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", default=str(HERE / "moe-first.db"))
    parser.add_argument("--dense", default="d4")
    parser.add_argument("--moe", default="d4-e8k2")
    args = parser.parse_args()
    if not pathlib.Path(args.store).is_file():
        refuse(f"{args.store}: no such store (decompress moe-first.db.xz, then run fp4lab fit study.toml)")
    with sqlite3.connect(f"file:{args.store}?mode=ro", uri=True) as db:
        rows = db.execute(PER_SEED, (args.moe, args.dense)).fetchall()
    if not rows:
        refuse(f"{args.store}: no paired contrasts of {args.moe} and {args.dense} (run fp4lab fit study.toml first)")
    deltas = {}
    for metric, recipe, seed, delta in rows:
        deltas.setdefault(metric, {}).setdefault(recipe, []).append((seed, delta))
    print(f"MoE-minus-dense difference of each recipe's gap to bf16 ({args.moe} − {args.dense}), pp, paired by seed")
    for metric in ("final_eval", "train_tail"):
        if metric not in deltas:
            continue
        # A pair needs both models' runs of the seed; fewer than two pairs give no interval.
        recipes = [r for r in sorted(deltas[metric]) if len(deltas[metric][r]) >= 2]
        for r in sorted(set(deltas[metric]) - set(recipes)):
            print(f"{metric}: {r}: fewer than two seeds with both models' contrasts: not tested")
        tests = {r: stats.paired_t([d for _, d in deltas[metric][r]]) for r in recipes}
        flips = {r: stats.sign_flip_p([d for _, d in deltas[metric][r]]) for r in recipes}
        holm = dict(zip(recipes, stats.holm([flips[r][0] for r in recipes])))
        print(f"{metric}: Holm over {len(recipes)}")
        print(f"  {'recipe':8} {'seeds':>5} {'mean Δ':>8} {'95% t interval':>20} {'p t':>7} {'p flip':>7} {'p Holm':>7}  per seed")
        for r in recipes:
            t = tests[r]
            per_seed = " ".join(f"s{s}:{d:+.3f}" for s, d in deltas[metric][r])
            print(f"  {r:8} {t['n']:5d} {t['mean']:+8.3f} [{t['lo']:+8.3f}, {t['hi']:+8.3f}] {t['p_t']:7.4f} "
                  f"{flips[r][0]:7.4f} {holm[r]:7.4f}  {per_seed}")


if __name__ == "__main__":
    main()
