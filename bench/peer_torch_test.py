#!/usr/bin/env python3
"""CPU self-check of bench/peer_torch.py (needs torch, runs in seconds, no GPU).

    python3 bench/peer_torch_test.py [--fp4lab build/cli/fp4lab]

1. peer_torch.py --check: hand-worked quantizer cases (grids, ties, scales, E4M3, RHT, SR) and the
   model's sizes against docs/model.md.
2. Against fp4lab's own reference quantizer: `fp4lab quant probe --input` on a heavy-tailed bf16
   tensor, every grid x scale mode x RHT setting (RN); the peer's alpha and nmse (NUMERICS.md §8)
   on the same tensor must agree to 1e-9 relative (the sums run in another order; a single
   differing element would move them by far more). Skipped when no fp4lab binary is found.
3. The benchmark harness end to end on the CPU (tiny model, eager): one JSON line per recipe with
   the fields the issue asks for, for a dense model and an MoE one (d1-e4k2: issue 33's fields too).
Prints "N passed, N failed" and exits non-zero on a failure.
"""

import argparse
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # leave no __pycache__ in bench/
import peer_torch as P  # noqa: E402

passed = failed = 0


def report(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAILED: {what}", file=sys.stderr)


def write_npy_f32(path, t):
    """A 2-D float32 .npy (format 1.0) without numpy."""
    rows, cols = t.shape
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}"
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{rows * cols}f", *t.reshape(-1).tolist()))


def find_fp4lab(explicit):
    if explicit:
        return explicit
    root = os.path.dirname(HERE)
    found = sorted(glob.glob(os.path.join(root, "build*", "cli", "fp4lab")), key=os.path.getmtime)
    return found[-1] if found else None


def test_against_reference(binary):
    torch.manual_seed(3)
    x = (torch.randn(128, 512) * torch.exp(torch.randn(128, 512))).to(torch.bfloat16)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.npy")
        write_npy_f32(path, x.float())
        out = subprocess.run([binary, "quant", "probe", "--input", path, "--grid", "e2m1,e1m2",
                              "--scale", "fp32,e4m3x2,e8m0", "--rht", "off,on", "--format", "json"],
                             capture_output=True, text=True)
    report(out.returncode == 0, f"fp4lab quant probe: {out.stderr.strip()}")
    if out.returncode:
        return
    rows = json.loads(out.stdout)["results"]
    report(len(rows) == 12, f"probe rows: {len(rows)}")
    for r in rows:
        spec = P.SlotSpec(r["grid"], P.GRID_MAX[r["grid"]], r["scale"], r["block"], rht=r["rht"])
        v, q, s, dec = P.quantize_parts(x, spec)
        # The probe measures the dequantized operand against the values after the RHT, with
        # e4m3x2's tensor scale applied, in fp64.
        deq = (q * s).to(torch.bfloat16).double() * float(dec)
        a = v.double()
        alpha = float((deq * a).sum() / (a * a).sum())
        nmse = float(((deq - a) ** 2).sum() / (a * a).sum())
        rel = max(abs(alpha / r["alpha"] - 1), abs(nmse / r["nmse"] - 1))
        report(rel < 1e-9, f"{r['grid']} {r['scale']} rht {r['rht']}: alpha {alpha} vs {r['alpha']}, "
                           f"nmse {nmse} vs {r['nmse']}")


def run_harness(model, recipes, label):
    """The peer on the CPU (eager), one step of a tiny shape: its JSON rows, or None when it failed."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.jsonl")
        cmd = [sys.executable, os.path.join(HERE, "peer_torch.py"), "--device", "cpu", "--no-compile",
               "--model", model, "--recipe", ",".join(recipes), "--seq-len", "64",
               "--micro-batch", "2", "--batch-tokens", "256", "--steps", "1", "--warmup", "1", "--json", out]
        run = subprocess.run(cmd, capture_output=True, text=True)
        report(run.returncode == 0, f"{label}: {run.stderr[-2000:]}")
        if run.returncode:
            return None
        return [json.loads(line) for line in open(out)]


def test_harness():
    rows = run_harness("d1", ["bf16", "e2m1", "ufp4", "nvfp4", "mxfp4"], "harness")
    if rows is None:
        return
    report([r["recipe"] for r in rows] == ["bf16", "e2m1", "ufp4", "nvfp4", "mxfp4"], "harness: one row per recipe")
    need = {"model", "recipe", "n_params", "n_params_nonembedding", "flops_per_token", "tokens_per_s",
            "step_ms", "peak_mem_bytes", "bf16_gemm_tflops", "mfu"}
    for r in rows:
        report(need <= set(r), f"harness fields: missing {need - set(r)}")
        report(r["grad_accum"] == 2 and r["n_params"] == 86208 and r["flops_per_token"] == 6 * 53440 + 6 * 64 * 64,
               f"harness counts: {r}")
        report(math.isfinite(r["final_loss"]) and r["tokens_per_s"] > 0, f"harness values: {r}")
        mfu = r["flops_per_token"] * r["tokens_per_s"] / (r["bf16_gemm_tflops"] * 1e12)
        report(abs(mfu - r["mfu"]) <= 1e-4 + 0.01 * mfu, f"harness mfu: {r}")
        report(r["n_experts"] == 0 and r["expert_path"] is None and r["n_params_active"] == r["n_params"],
               f"harness dense MoE fields: {r}")


def test_harness_moe():
    # d1-e4k2: d 64, 4 experts of width 96 (d_ff 192 / 2), top-2 (docs/model.md's MoE counts):
    # every expert 4d^2 + 2d + E d + 4 * 3 d f_e + d = 90560 non-embedding, 123328 with V = 256;
    # active (2 experts) 53696 and 86464; FLOPs/token 6 * 53696 + 6 * 64 * 64 at T = 64.
    recipes = ["bf16", "ufp4", "nvfp4", "mxfp4"]
    rows = run_harness("d1-e4k2", recipes, "MoE harness")
    if rows is None:
        return
    report([r["recipe"] for r in rows] == recipes, "MoE harness: one row per recipe")
    for r in rows:
        want = {"model": "d1-e4k2", "n_experts": 4, "top_k": 2, "d_ff_expert": 96, "n_params": 123328,
                "n_params_nonembedding": 90560, "n_params_active": 86464, "n_params_active_nonembedding": 53696,
                "flops_per_token": 6 * 53696 + 6 * 64 * 64, "expert_path": "loop"}
        report(all(r.get(k) == v for k, v in want.items()), f"MoE harness fields: {r}")
        # The reported loss is the cross-entropy alone (near ln 256 = 5.55 after two steps); the
        # auxiliary losses of the one MoE block are about 0.01 * 1 + 0.001 * ln(4)^2.
        report(math.isfinite(r["final_loss"]) and 4.5 < r["final_loss"] < 6.5 and 0.009 < r["final_aux_loss"] < 0.02,
               f"MoE harness losses: {r}")
        mfu = r["flops_per_token"] * r["tokens_per_s"] / (r["bf16_gemm_tflops"] * 1e12)
        report(abs(mfu - r["mfu"]) <= 1e-4 + 0.01 * mfu, f"MoE harness mfu: {r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fp4lab", help="the fp4lab binary (default: the newest build*/cli/fp4lab)")
    args = ap.parse_args()
    try:
        P.check()
        report(True, "")
    except AssertionError as e:
        report(False, f"peer_torch --check: {e}")
    binary = find_fp4lab(args.fp4lab)
    if binary and os.access(binary, os.X_OK):
        test_against_reference(binary)
    else:
        print("skipped: no fp4lab binary for the reference cross-check", file=sys.stderr)
    test_harness()
    test_harness_moe()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
