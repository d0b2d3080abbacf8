#!/usr/bin/env python3
"""PyTorch's fused attention at fp4lab_bench_attention's shapes: the peer of the attention goal.

Times torch.nn.functional.scaled_dot_product_attention (causal, bf16, head dim 64) forward and
backward with each backend PyTorch offers on the device (cuDNN, FlashAttention, memory-efficient),
and prints the rows fp4lab_bench_attention prints, with the same FLOP counts (the causal half of
the products: forward 2*2*B*H*T^2*hd / 2 for S = Q K^T and P V, backward 2.5 times that) against a
bf16 GEMM rate measured in the same process (torch.matmul, 8192^3), so that the two tables compare.

    python3 bench/peer_attention.py [--shapes 8x1024x12,4x2048x12] [--iters 50]
    python3 bench/peer_attention.py --device cpu --shapes 1x64x2 --iters 2   # the harness, eager CPU

Q, K and V are [B, T, H, hd] tensors seen as [B, H, T, hd] (the transposed view a model passes;
no copy), and dO likewise. Each timing is the median of --iters runs between CUDA events after
warm-up: the forward alone, then forward + backward, whose difference is the backward (what
fp4lab_bench_attention reports as bwd). A backend that refuses the shape or is not built prints
why instead of a row. PyTorch's backward kernels may accumulate dQ with atomics (their run-to-run
bits can differ); fp4lab's backward is deterministic, which is why its passes recompute more.
"""

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F


def median_ms(fn, iters, device):
    if device == "cpu":
        import time
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def gemm_tflops(device, iters):
    n = 8192 if device == "cuda" else 256
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    ms = median_ms(lambda: torch.matmul(a, b), iters, device)
    return n, ms, 2.0 * n * n * n / (ms * 1e-3) / 1e12


def backends():
    from torch.nn.attention import SDPBackend
    names = [("cuDNN", "CUDNN_ATTENTION"), ("FlashAttention", "FLASH_ATTENTION"),
             ("memory-efficient", "EFFICIENT_ATTENTION"), ("math", "MATH")]
    return [(label, getattr(SDPBackend, attr)) for label, attr in names if hasattr(SDPBackend, attr)]


def time_backend(backend, shape, iters, device):
    from torch.nn.attention import sdpa_kernel
    batch, seq, heads = shape
    hd = 64
    g = torch.Generator(device=device).manual_seed(0)

    def make():
        t = torch.randn(batch, seq, heads, hd, device=device, dtype=torch.bfloat16, generator=g)
        return t.transpose(1, 2).requires_grad_(True)

    q, k, v = make(), make(), make()
    dout = torch.randn(batch, seq, heads, hd, device=device, dtype=torch.bfloat16, generator=g).transpose(1, 2)
    with sdpa_kernel([backend]):
        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd():
            q.grad = k.grad = v.grad = None
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(dout)

        fwd_ms = median_ms(fwd, iters, device)
        total_ms = median_ms(fwd_bwd, iters, device)
    return fwd_ms, max(total_ms - fwd_ms, 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="8x1024x12,4x2048x12", help="BxTxH,... (head dim 64)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--backends", default="", help="labels to run, comma-separated (default: all but math)")
    args = ap.parse_args()
    shapes = []
    for s in args.shapes.split(","):
        try:
            b, t, h = (int(x) for x in s.split("x"))
        except ValueError:
            sys.exit(f"peer_attention.py: --shapes: '{s}' is not BxTxH (e.g. 8x1024x12)")
        shapes.append((b, t, h))
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("peer_attention.py: no CUDA device (pass --device cpu to run the harness on the CPU)")
    wanted = [w for w in args.backends.split(",") if w]
    chosen = [(l, b) for l, b in backends() if (l in wanted if wanted else l != "math" or args.device == "cpu")]

    n, ms, rate = gemm_tflops(args.device, max(args.iters // 5, 2))
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"torch {torch.__version__} on {name}; bf16 GEMM {n}^3 (torch.matmul): {ms:.3f} ms, {rate:.1f} TFLOP/s\n")
    print("| B | T | H | kernel | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | fwd+bwd ms | % of GEMM |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        b, t, h = shape
        fwd_flop = 2.0 * 2.0 * b * h * t * t * 64 / 2.0
        bwd_flop = 2.5 * fwd_flop
        for label, backend in chosen:
            try:
                fwd, bwd = time_backend(backend, shape, args.iters, args.device)
            except RuntimeError as e:  # the backend is not built here, or refuses the shape
                reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
                print(f"| {b} | {t} | {h} | torch SDPA {label} | unavailable: {reason} | | | | | |")
                continue
            total = (fwd_flop + bwd_flop) / ((fwd + bwd) * 1e-3) / 1e12
            print(f"| {b} | {t} | {h} | torch SDPA {label} | {fwd:.3f} | {fwd_flop / (fwd * 1e-3) / 1e12:.1f} | "
                  f"{bwd:.3f} | {bwd_flop / max(bwd, 1e-9) / 1e9:.1f} | {fwd + bwd:.3f} | {100.0 * total / rate:.0f}% |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
