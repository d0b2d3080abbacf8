#!/usr/bin/env python3
"""Groups an Nsight Compute CSV (metric gpu__time_duration.sum, one row per kernel launch) of a
short `fp4lab train --device cuda` run into the GPU time of one optimizer step.

The step taken is the run's second one: the kernels after the first step's last AdamW launch up to
and including the second step's last AdamW launch. A step of the profiled run holds
--profiled-passes training passes (micro-steps; bench/gpu_step_profile.sh runs 2), each starting
at its embedding_forward_kernel launch. What runs once per optimizer step is counted once: the
optimizer phase (gradient norm, AdamW) and the step's first pass, which also makes the weights'
bf16 copy and, under a 4-bit recipe, their quantized copies (with e4m3x2, their amax passes). The
step's last pass, which makes none of those, stands for each of the other --micro-steps - 1
passes of the step the table describes. So with 2 profiled passes the table is exact; with 1 (the
older profiles) every pass is weighed --micro-steps times, which over-weighs the weights' copies,
whose kernels share names with the activations' copies.

Prints a Markdown table: category, ms per step, share, launches per step; then the twenty kernels
that take the most time, each with its launches per step and mean time per launch.
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
    ("MoE routing, dispatch, gather, combine", r"router|count_kernel|fill_kernel|gather|sum_over_experts|dgates|expert_dy"),
    ("RoPE, SwiGLU, residual, embedding", r"rope|swiglu|residual|embedding"),
    ("conversions (fp32<->bf16, rounding)", r"bf16|round|float_to|to_float"),
]


def function_name(kernel):
    """The kernel's bare function name: no return type, namespaces, template or call arguments."""
    name = kernel.strip().replace("<unnamed>::", "")
    if name.startswith("void "):
        name = name[5:]
    name = name.split("(", 1)[0]
    template = re.search(r"<(.*)>$", name)
    name = re.sub(r"<.*>$", "", name)
    bare = name.rsplit("::", 1)[-1].strip()
    # cuBLAS's CUTLASS kernels are all cutlass::Kernel or cutlass::Kernel2 <the GEMM's name>: the
    # template argument says what runs (e.g. cutlass_80_simt_sgemm_..., an fp32 SIMT GEMM).
    if re.fullmatch(r"Kernel\d*", bare) and template:
        arg = re.match(r"[\w]+", template.group(1).strip())
        if arg:
            return arg.group(0)
    return bare


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
    parser.add_argument("--profiled-passes", type=int, default=1,
                        help="training passes per optimizer step in the profiled run")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    if not 1 <= args.profiled_passes <= args.micro_steps:
        sys.exit("--profiled-passes must be at least 1 and at most --micro-steps")
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
    starts = [i for i, (name, _) in enumerate(step) if name == "embedding_forward_kernel"]
    if len(starts) != args.profiled_passes:
        sys.exit(f"{args.csv}: the second step holds {len(starts)} training passes "
                 f"(embedding_forward_kernel launches), expected --profiled-passes {args.profiled_passes}")
    ms = defaultdict(float)
    count = defaultdict(int)
    per_kernel = defaultdict(float)
    per_kernel_count = defaultdict(int)
    for i, (name, t) in enumerate(step):
        label = category(name)
        if label.startswith("optimizer"):
            weight = 1  # once per step
        elif args.profiled_passes == 1:
            weight = args.micro_steps  # one pass a step profiled: every pass weighed alike
        elif i >= starts[-1]:
            weight = args.micro_steps - (args.profiled_passes - 1)  # the last pass stands for the rest
        else:
            weight = 1  # the first pass (it makes the weight copies) and any middle one
        ms[label] += weight * t
        count[label] += weight
        per_kernel[name] += weight * t
        per_kernel_count[name] += weight
    total = sum(ms.values())
    print(f"### {args.title}: GPU time of one step of {args.micro_steps} micro-steps, {total:.1f} ms of kernels\n")
    print("| category | ms per step | share | launches per step |")
    print("|---|---:|---:|---:|")
    for label, t in sorted(ms.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {t:.2f} | {100 * t / total:.1f}% | {count[label]} |")
    print("\n| kernel | ms per step | share | launches per step | µs per launch |")
    print("|---|---:|---:|---:|---:|")
    for name, t in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:20]:
        n = per_kernel_count[name]
        print(f"| `{name[:70]}` | {t:.2f} | {100 * t / total:.1f}% | {n} | {1000 * t / n:.1f} |")
    print()


if __name__ == "__main__":
    main()
