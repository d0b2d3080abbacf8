#!/usr/bin/env python3
"""Rerun a run recorded in a study's store and compare its bits with the store's.

The reproducibility promise (docs/train.md, "Reproducibility"): the same source and the same config
give the same bits on any Hopper GPU, for every commit of one numerics identity. This checks it for
one stored run: it reads the run's resolved config from the store, trains it again with the given
build (in a fresh directory, on the given built data), and compares every deterministic value of its
train and eval rows (loss, grad_norm, lr, bpb, ... : all fields but the wall-clock tokens_per_s and
elapsed_s) with the store's metrics, exactly (the store keeps metrics.jsonl's doubles bit for bit).

Usage: bench/rerun_stored.py STORE RUN FP4LAB [--data DIR] [--device cpu|cuda] [--keep DIR]
  STORE     a study's SQLite store (a committed .db.xz: decompress it first)
  RUN       the run's name, or a unique prefix of its id
  FP4LAB    the build that reruns it
  --data    the built data the run read (`fp4lab data build` of the same corpus; its fingerprint is
            checked where the store kept it); needed unless the run's data is a synthetic source
  --device  override the config's device (default: the config's own)
  --keep    train into DIR and keep it (default: a temporary directory, removed)
Prints "SAME BITS <run> (<n> train rows, <m> eval rows)" and exits 0, or "DIFFERENT <run>" with the
first differing values and exits 1; exit 2 when the run cannot be found or fails to train.
"""
import argparse
import json
import math
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
import tempfile

WALL_CLOCK = {"tokens_per_s", "elapsed_s"}
COMPARED_KINDS = ("train", "eval")


def fail(message):
    print(f"rerun_stored: {message}", file=sys.stderr)
    sys.exit(2)


def find_run(db, run):
    rows = db.execute("SELECT id, name, config_json FROM runs WHERE name = ?", (run,)).fetchall()
    if not rows:
        rows = db.execute("SELECT id, name, config_json FROM runs WHERE substr(id, 1, ?) = ?",
                          (len(run), run)).fetchall()
    if len(rows) != 1:
        what = "no run" if not rows else f"{len(rows)} runs"
        fail(f"{what} named or id-prefixed '{run}' in the store: give a run's name or a longer id prefix")
    return rows[0]


def stored_values(db, run_id):
    """{(kind, step, field): value} for the stored train and eval rows; None for a non-finite value."""
    values = {}
    for key, step, tokens, value, is_nan in db.execute(
            "SELECT key, step, tokens, value, is_nan FROM metrics WHERE run = ?", (run_id,)):
        kind, _, field = key.partition("/")
        if kind in COMPARED_KINDS and field not in WALL_CLOCK:
            values[(kind, step, field)] = None if is_nan else value
            values[(kind, step, "tokens")] = tokens
    return values


def rerun_values(metrics_path):
    """The same map from a fresh run's metrics.jsonl (the last row per (kind, step), as the store keeps)."""
    values, fingerprint = {}, None
    with open(metrics_path) as f:
        for line in f:
            row = json.loads(line)
            kind = row.get("kind")
            if kind == "run" and "data_fingerprint" in row:
                fingerprint = row["data_fingerprint"]
            if kind not in COMPARED_KINDS:
                continue
            for field, value in row.items():
                if field in ("kind", "step") or field in WALL_CLOCK or isinstance(value, str):
                    continue
                if isinstance(value, float) and not math.isfinite(value):
                    value = None
                values[(kind, row["step"], field)] = value
    return values, fingerprint


def stored_fingerprint(db, run_id):
    columns = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    if "data_fingerprint" not in columns:
        return None
    row = db.execute("SELECT data_fingerprint FROM runs WHERE id = ?", (run_id,)).fetchone()
    return row[0] if row and row[0] else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("run")
    parser.add_argument("fp4lab")
    parser.add_argument("--data")
    parser.add_argument("--device", choices=("cpu", "cuda"))
    parser.add_argument("--keep")
    args = parser.parse_args()

    if not os.path.isfile(args.store):
        fail(f"{args.store}: no such store (decompress a committed .db.xz first)")
    db = sqlite3.connect(f"file:{os.path.abspath(args.store)}?mode=ro", uri=True)
    run_id, name, config_json = find_run(db, args.run)
    stored = stored_values(db, run_id)
    if not stored:
        fail(f"run {name} has no train or eval rows in the store: nothing to compare")

    config = json.loads(config_json)
    if args.data:
        config["data"] = os.path.abspath(args.data)
    elif not str(config.get("data", "")).startswith("synthetic:"):
        fail(f"run {name} read {config.get('data')!r}: give the built data with --data DIR")
    if args.device:
        config["device"] = args.device
    work = pathlib.Path(args.keep) if args.keep else pathlib.Path(tempfile.mkdtemp(prefix="rerun-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        (work / "config.json").write_text(json.dumps(config))
        run_dir = work / "run"
        done = subprocess.run([args.fp4lab, "train", "--config", str(work / "config.json"),
                               "--dir", str(run_dir), "--quiet"], capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            fail(f"rerunning {name} failed (exit {done.returncode}): {last}")
        fresh, fingerprint = rerun_values(run_dir / "metrics.jsonl")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    kept = stored_fingerprint(db, run_id)
    if kept and fingerprint and kept != fingerprint:
        print(f"DIFFERENT {name}: the data differ (stored fingerprint {kept}, this data {fingerprint})")
        return 1
    differences = []
    for key in sorted(set(stored) | set(fresh)):
        a, b = stored.get(key, "absent"), fresh.get(key, "absent")
        if a != b:
            differences.append(f"  {key[0]} step {key[1]} {key[2]}: stored {a!r}, rerun {b!r}")
    counts = {kind: len({k[1] for k in stored if k[0] == kind}) for kind in COMPARED_KINDS}
    if differences:
        print(f"DIFFERENT {name}: {len(differences)} values differ; the first:")
        print("\n".join(differences[:6]))
        return 1
    print(f"SAME BITS {name} ({counts['train']} train rows, {counts['eval']} eval rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
