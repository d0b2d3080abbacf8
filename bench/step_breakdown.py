#!/usr/bin/env python3
"""Groups an Nsight Compute CSV (metric gpu__time_duration.sum, one row per kernel launch) of a
short `fp4lab train --device cuda` run into the GPU time of one optimizer step.

The run must have one micro-step per optimizer step (bench/gpu_step_profile.sh sets that up). The
step taken is the second one: the kernels after the first step's last AdamW launch up to and
including the second step's last AdamW launch. Kernels of the optimizer phase (gradient norm,
AdamW) run once per step; all others once per micro-step, so they are weighed by --micro-steps
to stand for a step of that many micro-steps. Under a 4-bit recipe that over-weighs the weights'
quantized copies (and, under e4m3x2 recipes, their amax passes), which are made once per optimizer
step: their kernels share names with the activations' copies, so the table cannot tell them
apart; the step times of bench/gpu_train.sh are the real ones. Prints a Markdown table: category,
ms per step, share, launches per step; then the ten kernels that take the most time.
"""
import argparse
import csv
import re
import sys
from collections import defaultdict

CATEGORIES = [
    # (category, regex on the kernel's function name), first match wins
    ("optimizer (AdamW, gradient norm)", r"adamw|sum_partial|sum_final"),
    ("attention", r"flash|attention"),
    ("quantization (fused quantizers, amax)", r"quantiz|amax|strip|row_rn|scale_product"),
    ("GEMM (cuBLASLt and split-K sum)", r"gemm|nvjet|xmma|cutlass|sm90|split_k|splitk|cublas"),
    ("norms (RMSNorm fwd/bwd)", r"rmsnorm"),
    ("cross-entropy", r"cross_entropy"),
    ("RoPE, SwiGLU, residual, embedding", r"rope|swiglu|residual|embedding"),
    ("conversions (fp32<->bf16, rounding)", r"bf16|round|float_to|to_float"),
]


def function_name(kernel):
    """The kernel's bare function name: no return type, namespaces, template or call arguments."""
    name = kernel.strip().replace("<unnamed>::", "")
    if name.startswith("void "):
        name = name[5:]
    name = name.split("(", 1)[0]
    name = re.sub(r"<.*>$", "", name)
    return name.rsplit("::", 1)[-1].strip()


def category(name):
    for label, pattern in CATEGORIES:
        if re.search(pattern, name, re.IGNORECASE):
            return label
    return "other"


def read_launches(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    launches = []
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}.get(unit, 1e-6)
        launches.append((function_name(row["Kernel Name"]), value * scale))
    return launches


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("csv")
    parser.add_argument("--micro-steps", type=int, default=8)
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    launches = read_launches(args.csv)
    if not launches:
        sys.exit(f"{args.csv}: no gpu__time_duration.sum rows; see the .err file beside it")
    adamw = [i for i, (name, _) in enumerate(launches) if "adamw" in name]
    # Clusters of AdamW launches, one per step (launches of one step lie close together).
    ends = []
    for i in adamw:
        if ends and i - ends[-1] <= 50:
            ends[-1] = i
        else:
            ends.append(i)
    if len(ends) < 2:
        sys.exit(f"{args.csv}: found {len(ends)} optimizer step(s) among {len(launches)} launches; need 2")
    step = launches[ends[0] + 1: ends[1] + 1]
    ms = defaultdict(float)
    count = defaultdict(int)
    per_kernel = defaultdict(float)
    for name, t in step:
        label = category(name)
        weight = 1 if label.startswith("optimizer") else args.micro_steps
        ms[label] += weight * t
        count[label] += weight
        per_kernel[name] += weight * t
    total = sum(ms.values())
    print(f"### {args.title}: GPU time of one step of {args.micro_steps} micro-steps, {total:.1f} ms of kernels\n")
    print("| category | ms per step | share | launches per step |")
    print("|---|---:|---:|---:|")
    for label, t in sorted(ms.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {t:.2f} | {100 * t / total:.1f}% | {count[label]} |")
    print("\n| kernel | ms per step | share |")
    print("|---|---:|---:|")
    for name, t in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:12]:
        print(f"| `{name[:70]}` | {t:.2f} | {100 * t / total:.1f}% |")
    print()


if __name__ == "__main__":
    main()
