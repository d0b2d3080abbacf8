"""test_analysis.py — analysis.py and interim.py end to end on a synthetic store with a known effect:
python3 results/second-study/test_analysis.py (exit 1 on a failure). The store holds only what the two
scripts read (the runs and metrics tables and the final_losses view, as fp4lab's store defines them)."""
import contextlib
import io
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile

import analysis

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def make_store(path, effect_pp, sd_pp, seeds_d4, diverge=None):
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE runs (id TEXT PRIMARY KEY, recipe TEXT, baseline INTEGER, model TEXT, n_params INTEGER,
                           n_params_nonembedding INTEGER, tokens INTEGER, seed INTEGER, state TEXT, match_key TEXT);
        CREATE TABLE metrics (run TEXT, key TEXT, step INTEGER, tokens INTEGER, value REAL, is_nan INTEGER,
                              PRIMARY KEY (run, key, step));
        CREATE VIEW final_losses AS
        SELECT r.id, r.name, r.recipe, r.baseline, r.model, r.n_params, r.n_params_nonembedding, r.tokens,
               r.seed, r.state, r.match_key, m.step AS final_step, m.value AS final_loss, m.is_nan AS final_is_nan
        FROM (SELECT *, id AS name FROM runs) AS r
        JOIN metrics AS m ON m.run = r.id AND m.key = 'eval/loss'
        WHERE m.step = (SELECT MAX(step) FROM metrics WHERE run = r.id AND key = 'eval/loss');
    """)
    rng = random.Random(1)
    sizes = {"d4": (3213568, 1.38, seeds_d4), "d5": (6045120, 1.30, 16), "d6": (10621824, 1.24, 16)}
    for size, (n, base, seeds) in sizes.items():
        for seed in range(seeds):
            shared = rng.gauss(0, 0.004)      # the seed's own luck, common to its recipes
            e2m1 = base * (1.025 + shared + rng.gauss(0, 0.004))
            losses = {"e2m1": e2m1, "ufp4": e2m1 + base * (effect_pp + rng.gauss(0, sd_pp)) / 100.0}
            if seed < 4:
                losses["bf16"] = base * (1 + shared + rng.gauss(0, 0.002))
            if seed < (8 if size == "d4" else 4):
                losses["nvfp4"] = base * (1.03 + shared + rng.gauss(0, 0.004))
            for recipe, loss in losses.items():
                rid = f"{size}-{recipe}-{seed}"
                state = "diverged" if diverge == (size, recipe, seed) else "succeeded"
                db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
                           (rid, recipe, recipe == "bf16", size, n, n, 20 * n, seed, state, f"{size}-{seed}"))
                for step in range(1, 101):
                    db.execute("INSERT INTO metrics VALUES (?,?,?,?,?,?)",
                               (rid, "train/loss", step, step, loss + 0.001 * (100 - step), 0))
                db.execute("INSERT INTO metrics VALUES (?,?,?,?,?,?)",
                           (rid, "eval/loss", 100, 100, loss, int(state == "diverged")))
    db.commit()
    db.close()


def run_analysis(path):
    out = io.StringIO()
    argv = sys.argv
    sys.argv = ["analysis.py", path]
    try:
        with contextlib.redirect_stdout(out):
            analysis.main()
    finally:
        sys.argv = argv
    return out.getvalue()


with tempfile.TemporaryDirectory() as tmp:
    # A clear effect of -0.5 pp with sd 0.3 pp over 48 seeds: resolved, interval around -0.5.
    path = os.path.join(tmp, "effect.db")
    make_store(path, -0.5, 0.3, 48)
    text = run_analysis(path)
    m = re.search(r"95% Student-t interval over seeds: \[([-+0-9.]+), ([-+0-9.]+)\]", text)
    if not m or not (float(m.group(1)) < -0.5 < float(m.group(2))):
        failures.append("the primary interval does not cover the true effect -0.5 pp:\n" + text)
    if "confirms the direction of claim 3" not in text:
        failures.append("a clear negative effect is not read as confirming")
    if "| d4 | 48 |" not in text:
        failures.append("the variance table lacks d4's 48 pairs")

    # No effect: not resolved, and the verdict says whether the paper's effect is excluded.
    path = os.path.join(tmp, "null.db")
    make_store(path, 0.0, 0.3, 48)
    if "not resolved" not in run_analysis(path):
        failures.append("a null effect is not read as not resolved")

    # A diverged run drops its pair from the primary and shows in the run counts.
    path = os.path.join(tmp, "diverged.db")
    make_store(path, -0.5, 0.3, 48, diverge=("d4", "ufp4", 7))
    text = run_analysis(path)
    if "- seeds: 47" not in text or "| d4 | ufp4 | 47 | 1 | 0 | 0 |" not in text:
        failures.append("a diverged run is not excluded and counted:\n" + text)

    # interim.py: the 16-seed sd only (never the mean), and the rule's n.
    path = os.path.join(tmp, "interim.db")
    make_store(path, -0.5, 0.86, 16)
    res = subprocess.run([sys.executable, os.path.join(HERE, "interim.py"), path], capture_output=True, text=True)
    if res.returncode != 0 or "n = min(64, max(48, that)) = " not in res.stdout or "mean" in res.stdout:
        failures.append(f"interim.py: rc {res.returncode}: {res.stdout}{res.stderr}")
    path = os.path.join(tmp, "early.db")
    make_store(path, -0.5, 0.86, 12)
    res = subprocess.run([sys.executable, os.path.join(HERE, "interim.py"), path], capture_output=True, text=True)
    if res.returncode != 2:
        failures.append(f"interim.py before seed 15 ended: rc {res.returncode}, want 2")

if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("analysis.py, interim.py: all checks passed")
