#!/usr/bin/env python3
"""PyTorch speed peer of fp4lab's training step (issue 4; its mixture-of-experts models: issue 33).

Builds the model of docs/model.md in PyTorch, trains it with the optimizer of docs/train.md, and
measures tokens/s and model FLOP utilization (MFU) against a bf16 GEMM rate measured in the same
process. For the 4-bit recipes every block linear (qkv, attn_out, mlp_in, mlp_out, and each
expert's mlp_in and mlp_out) fake-quantizes the operands of its three GEMMs with ordinary torch
operations following NUMERICS.md.

    python3 bench/peer_torch.py --model d6 --recipe ufp4 --seq-len 1024 --micro-batch 8 \
        --batch-tokens 65536 --steps 20 --warmup 5 --vocab 256 [--no-compile] [--json out.jsonl]
    python3 bench/peer_torch.py --model d6,d12 --recipe bf16,e2m1,ufp4,nvfp4   # one line per pair
    python3 bench/peer_torch.py --model d6-e8k2,d6 --recipe bf16,ufp4   # an MoE model and its dense twin
    python3 bench/peer_torch.py --check        # CPU self-check of the fake quantizer, seconds

Models: d<L>, and fp4lab's MoE presets d<L>-e<E>k<K> (docs/model.md, "Mixture of experts"): the
dimensions of d<L> with an MoE block in every layer instead of the SwiGLU MLP, E routed experts of
width d_ff_expert = d_ff / K (to the nearest multiple of 32), top-K, no shared experts. The experts
run as grouped GEMMs (torch._grouped_mm, PyTorch >= 2.8 on sm90) or, where that is missing or
fails a one-off probe against the loop (always on the CPU), as a loop over the experts: the line's
"expert_path" says which ("grouped_mm" or "loop"); --expert-path forces one.

Recipes: bf16, e2m1, ufp4, nvfp4, and also mxfp4 and ufp4-e4m3 (NUMERICS.md §5 presets). Each
(model, recipe) pair prints one JSON line on stdout (and appends it to --json); --time-budget
skips the pairs not yet started once that many seconds have passed; --device cpu runs the harness
on the CPU (eager), for testing only. Each transformer block and the head + loss are compiled as
separate regions (see Transformer.compile_parts); if compilation fails, the pair is measured in
eager mode and its line carries "compiled": false and "compile_error".

What is the same as fp4lab
  * Architecture, sizes and parameter counts (docs/model.md): pre-norm RMSNorm (eps 1e-5, gain, no
    bias), RoPE on interleaved pairs (2i, 2i+1) with base 10000, causal MHA with head_dim 64,
    SwiGLU with mlp_in producing gate | up, untied embedding and LM head, no biases; init
    N(0, 0.02^2) with attn_out / mlp_out at 0.02 / sqrt(2 L), gains 1.
  * MoE blocks (docs/model.md, "Mixture of experts"; engine/model/moe_block.cpp): the router
    [E, d] in fp32 from the fp32 master weights on the bf16 normed hidden state, never quantized;
    softmax scores, the top-K logits, gates renormalized over the chosen K when K > 1; each expert
    a SwiGLU of width d_ff_expert with its own mlp_in [2 f_e, d] (gate | up) and mlp_out [d, f_e]
    (init as the dense ones, the router N(0, 0.02^2), weight decay on all three);
    dropless dispatch (every token reaches its K experts); the combine sum_c gate_c * y_c in fp32
    over the token's experts in ascending expert index, stored bf16; the auxiliary losses added to
    the objective per MoE block, alpha * E * sum_i f_i P_i (f_i the share of the micro-batch's
    token-expert assignments, no gradient; P_i the mean score) with alpha = 0.01 and the z-loss
    beta * mean_t logsumexp(z_t)^2 with beta = 0.001; the reported loss is the cross-entropy alone.
  * Precision: fp32 master weights, fp32 gradients and AdamW state; every GEMM takes bf16 operands
    and accumulates in fp32 (bf16 autocast); activations and the residual stream are bf16; norms,
    RoPE, SwiGLU and the loss compute in fp32.
  * Optimizer (docs/train.md): AdamW betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices only
    (never on norm gains), global gradient-norm clipping at 1.0, linear warmup then cosine to
    lr / 10; gradient accumulation up to --batch-tokens per optimizer step.
  * Quantization (NUMERICS.md §1-5): the six operand slots with blocks along each GEMM's reduction
    dimension, the grids with RN ties-to-even and SR, the fp32 / e4m3x2 / e8m0 scale formulas in
    TransformerEngine's operation order, 16x16 weight tiles where the preset says so, the 16-point
    RHT with the fixed sign vector, straight-through backward, and e4m3x2's tensor scales applied
    as the GEMM's alpha. In eager mode on the CPU the dequantized operands are the bits that
    kernels/numerics.h defines: --check asserts hand-worked cases, and bench/peer_torch_test.py
    compares the peer with `fp4lab quant probe` on one tensor for every grid x scale x RHT.

Where the peer differs (it measures speed; it is not a second reference)
  * SR draws u with torch.rand (24 random bits, like fp4lab's u), not Philox4x32-10: the values
    differ draw by draw, the distribution is the same.
  * Initialization uses torch's generator, not fp4lab's Philox-keyed Box-Muller.
  * Non-finite inputs are not flagged: a NaN simply propagates through its block.
  * GEMM outputs are rounded to bf16 (what cuBLAS returns under autocast), then scaled by the
    e4m3x2 alpha; fp4lab scales the fp32 result before storing it. dW is likewise a bf16 GEMM
    result widened to fp32 before it is accumulated, as in any autocast training loop.
  * The logits are the bf16 output of the LM-head GEMM (fp4lab keeps them fp32 in a fused
    head + loss); cross-entropy then runs in fp32.
  * Under torch.compile, Inductor may lower an fp32 division to a faster instruction than IEEE
    division, so a block scale can differ in its last bit from the reference; this does not change
    the amount of work.
  * Gradient clipping uses torch's factor max_norm / (norm + 1e-6) (fp4lab: max_norm / norm).
  * Only the presets' fixed RHT signs are implemented; bf16_layers is not.
  * MoE blocks: the dispatch sorts the token-expert pairs by expert (stable, so each expert's rows
    are its tokens in ascending index, as fp4lab's groups) into one buffer of static size in which
    each expert's group is padded with zero rows to a multiple of 16 (of the recipe's wgrad block
    if larger) and holds at least one such block (never empty), so that the shapes never depend on
    the routing (no host synchronization, one compiled graph per block; fp4lab pads only to the
    wgrad block, not at all in bf16, and skips an expert that no token chose, whose gradient is
    zero either way). The experts' fprop, dgrad and wgrad GEMMs are each one grouped GEMM over that buffer
    (2-D x 3-D, and 2-D x 2-D for dW); the loop fallback runs the same GEMMs expert by expert over
    the same buffer, reading the group sizes on the host. The combine and the backward's sum over a
    token's experts are gathers followed by a sum over the K choices in order: the gathers'
    backward scatters write each row once, so nothing depends on the order of atomic additions.
  * MoE routing: torch.topk's order among exactly tied logits is not fp4lab's lower-index rule;
    the router's gradient reaches the bf16 hidden state through torch's autocast casts (one more
    bf16 rounding of its share than fp4lab's single rounding of the sum).
  * MoE quantization is per group as in fp4lab: X and dY blocked along the features per row,
    blocked along the tokens (within the group's padded rows) for dW, weights per expert, and
    e4m3x2's tensor scale taken per expert group (a segment amax over the group's rows) and
    applied to that group's rows of the output. SR draws come from torch.rand over the whole
    buffer, not fp4lab's per-token keys. Only the presets' shape is built: every block MoE,
    softmax scores, no shared experts (fp4lab's moe.every, moe.shared and sigmoid scores are not).

FLOP accounting is docs/model.md's: flops_per_token = 6 N_nonemb + 6 L T d (the LM head and the
quantizers are not counted), mfu = flops_per_token * tokens_per_s / bf16 GEMM FLOP/s. For an MoE
model N_nonemb is the active count (the router and top-K experts per block: fp4lab's
train_flops_per_token); the line carries both n_params (every expert) and n_params_active.
"""

import argparse
import dataclasses
import itertools
import json
import math
import re
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

BF16 = torch.bfloat16
F32 = torch.float32
FLT_MAX = 3.4028234663852886e38  # exactly fp32's largest finite value

# ---------------------------------------------------------------------------------------------
# Recipes (NUMERICS.md §5, engine/recipe.cpp)
# ---------------------------------------------------------------------------------------------

# The six operand slots in NUMERICS.md's order: fprop_x, fprop_w, dgrad_dy, dgrad_w, wgrad_dy, wgrad_x.
SLOT_GEMM = ("fprop", "fprop", "dgrad", "dgrad", "wgrad", "wgrad")
SLOT_OPERAND = ("x", "w", "dy", "w", "dy", "x")

GRID_MAX = {"e2m1": 6.0, "e1m2": 7.0}

# TransformerEngine's fixed RHT signs + + + - + - - - - - - + - + - - (NUMERICS.md §4), i.e.
# kernels/numerics.h's kRhtFixedSigns = 0xD7E8 with bit i set meaning sigma_i = -1.
RHT_FIXED_MASK = 0xD7E8
RHT_FIXED_SIGNS = tuple(-1.0 if (RHT_FIXED_MASK >> i) & 1 else 1.0 for i in range(16))


@dataclasses.dataclass(frozen=True)
class SlotSpec:
    """How one operand slot is quantized. Blocks always run along the tensor's last dimension:
    the caller hands over the copy oriented so that the GEMM's reduction dimension is last."""

    grid: str = "e2m1"       # e2m1 | e1m2
    gmax: float = 6.0        # G_max (the grid's maximum or a clip)
    scale: str = "fp32"      # fp32 | e4m3x2 | e8m0
    block: int = 16          # 16, or 32 with e8m0
    tile_2d: bool = False    # one scale per block x block tile (weights)
    rht: bool = False        # 16-point RHT along the reduction dimension
    rht_signs: tuple = RHT_FIXED_SIGNS  # sigma; the presets use the fixed vector
    sr: bool = False         # stochastic rounding (else round-to-nearest, ties to even)


def make_preset(grid, scale, block, w_tiles_2d, rht_gemms):
    """engine/recipe.cpp's make_preset: one format everywhere, RHT on the listed GEMMs, SR on dY."""
    slots = []
    for gemm, operand in zip(SLOT_GEMM, SLOT_OPERAND):
        slots.append(SlotSpec(grid=grid, gmax=GRID_MAX[grid], scale=scale, block=block,
                              tile_2d=w_tiles_2d and operand == "w", rht=gemm in rht_gemms,
                              sr=operand == "dy"))
    return tuple(slots)


PRESETS = {
    "bf16": None,
    "e2m1": make_preset("e2m1", "fp32", 16, False, ("wgrad",)),
    "ufp4": make_preset("e1m2", "fp32", 16, False, ("fprop", "dgrad", "wgrad")),
    "nvfp4": make_preset("e2m1", "e4m3x2", 16, True, ("wgrad",)),
    "mxfp4": make_preset("e2m1", "e8m0", 32, False, ("wgrad",)),
    "ufp4-e4m3": make_preset("e1m2", "e4m3x2", 16, False, ("fprop", "dgrad", "wgrad")),
}

# ---------------------------------------------------------------------------------------------
# Fake quantizer (NUMERICS.md §2-4), vectorized: no Python loop touches elements, so Inductor can
# fuse a whole slot (RHT, amax, scale, rounding, dequantization) into one or two kernels.
# ---------------------------------------------------------------------------------------------


def _scalar(ref, value):
    # A 0-dim fp32 tensor on ref's device. Dividing by it is an IEEE tensor/tensor division;
    # dividing by a Python number may be turned into a multiplication by its reciprocal.
    return torch.tensor(value, dtype=F32, device=ref.device)


def _exponent(a):
    """floor(log2(a)) for a positive normal fp32 a, read from the exponent field; a zero or
    subnormal a gives -127 (every caller clamps far above that), +Inf / NaN give 128."""
    return ((a.view(torch.int32) >> 23) & 0xFF) - 127


def _pow2(e):
    """2^e as fp32 for an int32 tensor e in [-126, 127], exact (built from the exponent field)."""
    return ((e + 127) << 23).view(F32)


def e4m3_rn_satfinite(a):
    """Round a non-negative fp32 tensor to E4M3 (bias 7, max 448, subnormal quantum 2^-9),
    round-to-nearest-even, saturating to 448 (cvt.rn.satfinite; kernels/numerics.h). NaN stays NaN."""
    e = _exponent(a).clamp(-6, 8)     # E4M3's quantum at a's binade is 2^(e-3); below 2^-6 it is 2^-9
    q = e - 3
    n = torch.round(a * _pow2(-q))    # exact power-of-two scaling, then half-to-even to an integer
    r = n * _pow2(q)
    return torch.where(a >= 448.0, torch.full_like(a, 448.0), torch.minimum(r, torch.full_like(a, 448.0)))


def _e2m1_magnitude(i):
    # Code index 0..7 (as fp32) -> 0, 0.5, 1, 1.5, 2, 3, 4, 6.
    return torch.where(i < 4, 0.5 * i, torch.where(i == 7, torch.full_like(i, 6.0), i - 2.0))


def _e2m1_max_index(gmax):
    return 7.0 if gmax >= 6 else (6.0 if gmax >= 4 else (5.0 if gmax >= 3 else 4.0))


def round_to_grid(x, spec, u=None):
    """Round magnitudes x >= 0 (fp32, may be +Inf, never NaN) onto spec's grid; returns magnitudes.
    RN: ties to the even code index, saturating at G_max. SR: hi with probability (x-lo)/(hi-lo)."""
    gmax = spec.gmax
    if spec.grid == "e1m2":
        if not spec.sr:
            # Integers: torch.round is half-to-even; clamping gives saturation and any clip.
            return torch.round(x).clamp(max=gmax)
        lo = torch.floor(x)
        q = lo + (u < (x - lo)).to(F32)   # hi - lo = 1
        return torch.where(x >= gmax, torch.full_like(x, gmax), q)
    if not spec.sr:
        # Count the midpoints passed; a midpoint whose lower neighbour has the even code uses ">"
        # (a tie goes down), one whose upper neighbour is even uses ">=" (a tie goes up).
        i = ((x > 0.25).to(F32) + (x >= 0.75).to(F32) + (x > 1.25).to(F32) + (x >= 1.75).to(F32)
             + (x > 2.5).to(F32) + (x >= 3.5).to(F32) + (x > 5.0).to(F32))
        return _e2m1_magnitude(i.clamp(max=_e2m1_max_index(gmax)))
    lo_i = torch.where(x < 2.0, torch.floor(x * 2.0),
                       torch.where(x < 3.0, torch.full_like(x, 4.0),
                                   torch.where(x < 4.0, torch.full_like(x, 5.0), torch.full_like(x, 6.0))))
    lo_i = lo_i.clamp(max=6.0)
    lo, hi = _e2m1_magnitude(lo_i), _e2m1_magnitude(lo_i + 1.0)
    p = (x - lo) / (hi - lo)
    q = torch.where(u < p, hi, lo)
    return torch.where(x >= gmax, torch.full_like(x, gmax), q)


def rht16(v, mask_signs=RHT_FIXED_SIGNS):
    """v' = 1/4 FWHT16(v * sigma) on every 16-vector of the last dimension, in fp32, with the
    butterfly stages h = 1, 2, 4, 8 of NUMERICS.md §4 (so the sums round as the reference's do)."""
    shape = v.shape
    sigma = torch.tensor(mask_signs, dtype=F32, device=v.device)
    w = v.reshape(-1, 16) * sigma
    for h in (1, 2, 4, 8):
        # Index i = a * 2h + b * h + c: b is bit h of i, so (b = 0, b = 1) are the butterfly's pair.
        w = w.reshape(-1, 16 // (2 * h), 2, h)
        a, b = w[:, :, 0, :], w[:, :, 1, :]
        w = torch.stack((a + b, a - b), dim=2)
    return w.reshape(shape) * 0.25


def _tensor_amax(amax_b, n_lead, groups, block):
    """e4m3x2's tensor amax from the block amaxes: over the whole tensor (a 0-dim result), over each
    leading index (each expert's weights: keepdim), or over each group of rows or of block columns
    (groups = (ids, n, axis): a segment amax, [n]). Returns (amax, ids to broadcast it or None)."""
    if groups is None:
        if n_lead == 0:
            return amax_b.amax(), None
        return amax_b.amax(dim=tuple(range(n_lead, amax_b.dim())), keepdim=True), None
    ids, n, axis = groups
    if axis == 0:   # ids per row: blocks run along the row
        unit, gid, shape = amax_b.amax(dim=(1, 2)), ids, (-1, 1, 1)
    else:           # ids per column, constant over each block of columns
        unit, gid, shape = amax_b.amax(dim=(0, 2)), ids[::block], (1, -1, 1)
    amax = torch.zeros(n, dtype=F32, device=amax_b.device).scatter_reduce(0, gid, unit, "amax")
    return amax, (gid, shape)


def quantize_parts(t, spec, groups=None):
    """Quantize a [..., R, C] tensor blocked along C (the GEMM's reduction dimension is last); each
    leading index is a tensor of its own (an expert's weights). groups = (ids, n, axis), for a 2-D
    tensor holding the rows of n expert groups: ids [R] (axis 0) or ids [C] (axis 1, constant over
    each block) give each row's or column's group, and e4m3x2's tensor scale is taken per group.
    Returns (v, q, s, dec): the values after the RHT grouped in blocks, the signed grid values, the
    stored block scales (broadcastable to v), and S_dec (1 unless e4m3x2; per leading index, or
    [n] per group)."""
    *lead, R, C = t.shape
    B = spec.block
    if C % B or (spec.tile_2d and R % B) or (groups is not None and (lead or spec.tile_2d)):
        raise ValueError(f"quantize: shape {tuple(t.shape)} does not fit block {B} (tile_2d={spec.tile_2d}, "
                         f"groups={groups is not None})")
    v = t.to(F32)
    if spec.rht:
        v = rht16(v, spec.rht_signs)
    if spec.tile_2d:
        v = v.reshape(*lead, R // B, B, C // B, B)
        amax_b = v.abs().amax(dim=(-3, -1), keepdim=True)
    else:
        v = v.reshape(*lead, R, C // B, B)
        amax_b = v.abs().amax(dim=-1, keepdim=True)
    one = _scalar(t, 1.0)
    dec = one
    if spec.scale == "fp32":
        s = amax_b / _scalar(t, spec.gmax)
        x = (v / s).abs()
        x = torch.where(torch.isnan(x), torch.zeros_like(x), x)  # 0/0 in an all-zero block is 0
    elif spec.scale == "e4m3x2":
        # TransformerEngine's order (NUMERICS.md §3): the tensor amax is the largest block amax.
        amax_t, spread = _tensor_amax(amax_b, len(lead), groups, B)
        enc = (_scalar(t, 448.0 * spec.gmax) / amax_t).clamp(max=FLT_MAX)
        enc = torch.where((amax_t == 0) | (enc == 0), one, enc)
        dec = one / enc
        enc_b, dec_b = enc, dec
        if spread is not None:  # each block takes its group's tensor scale
            gid, shape = spread
            enc_b, dec_b = enc[gid].reshape(shape), dec[gid].reshape(shape)
        enc_per_gmax = enc_b * (one / _scalar(t, spec.gmax))
        s = e4m3_rn_satfinite(amax_b * enc_per_gmax)
        mul = (one / (s * dec_b)).clamp(max=FLT_MAX)  # s == 0: 1/0 = Inf, capped
        x = (v * mul).abs()
    elif spec.scale == "e8m0":
        e = (_exponent(amax_b) - 2).clamp(-127, 127)  # emax = 2 for both grids
        # 2^-127 is subnormal: build it apart (only zero or tiny blocks reach it).
        s = torch.where(e >= -126, _pow2(e.clamp(min=-126)), _scalar(t, 2.0 ** -127))
        x = (v / s).abs()
    else:
        raise ValueError(f"unknown scale mode {spec.scale}")
    u = torch.rand_like(x) if spec.sr else None
    q = torch.copysign(round_to_grid(x, spec, u), v)
    return v, q, s, dec


def fake_quant(t, spec, groups=None):
    """The dequantized bf16 operand [..., R, C] (blocked along C) and its tensor scale S_dec."""
    _, q, s, dec = quantize_parts(t, spec, groups)
    return (q * s).to(BF16).reshape(t.shape), dec


def _scaled_mm(a, b, alpha=None):
    # bf16 x bf16 -> bf16 with fp32 accumulation (cuBLAS), then e4m3x2's alpha = S_dec_A * S_dec_B.
    y = a @ b
    return y if alpha is None else (y.to(F32) * alpha).to(BF16)


def make_quantized_linear(slots):
    """A torch.autograd.Function for y = x @ w.T whose three GEMMs use the recipe's six slots
    (NUMERICS.md §1), straight-through: each quantizer is the identity for the gradient."""
    fx, fw, ddy, dw_, wdy, wx = slots
    alpha = {g: a.scale == "e4m3x2" or b.scale == "e4m3x2"
             for g, a, b in (("fprop", fx, fw), ("dgrad", ddy, dw_), ("wgrad", wdy, wx))}
    # With 16x16 weight tiles, RN and no RHT, the fprop copy (blocked along K) and the dgrad copy
    # (blocked along N) of W hold the same values (NUMERICS.md §3): quantize W once, reuse it.
    reuse_w = fw == dw_ and fw.tile_2d and not fw.rht and not fw.sr

    class QuantizedLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):           # x [T, K] (any dtype), w [N, K] fp32 master
            xb, wb = x.to(BF16), w.to(BF16)
            qx, ax = fake_quant(xb, fx)   # X along K
            qw, aw = fake_quant(wb, fw)   # W along K
            y = _scaled_mm(qx, qw.t(), ax * aw if alpha["fprop"] else None)
            ctx.save_for_backward(xb, qw if reuse_w else wb, aw)
            return y

        @staticmethod
        def backward(ctx, dy):            # dy [T, N]
            xb, w_saved, aw = ctx.saved_tensors
            dy = dy.to(BF16)
            # dgrad: dX = dY . W, reduction over N: dY along N (rows), W along N (its columns).
            qdy, ady = fake_quant(dy, ddy)
            if reuse_w:
                dx = _scaled_mm(qdy, w_saved, ady * aw if alpha["dgrad"] else None)
            else:
                qwt, awt = fake_quant(w_saved.t(), dw_)          # [K, N], blocked along N
                dx = _scaled_mm(qdy, qwt.t(), ady * awt if alpha["dgrad"] else None)
            # wgrad: dW = dY^T . X, reduction over the tokens T: both operands along T.
            qdyt, ady2 = fake_quant(dy.t(), wdy)                 # [N, T]
            qxt, ax2 = fake_quant(xb.t(), wx)                    # [K, T]
            dw = _scaled_mm(qdyt, qxt.t(), ady2 * ax2 if alpha["wgrad"] else None)
            return dx, dw.to(F32)

    return QuantizedLinear


# ---------------------------------------------------------------------------------------------
# Grouped expert GEMMs (MoE blocks): one buffer holds every expert's group of rows, group g being
# rows offs[g-1] .. offs[g] (offs: the int32 cumulative group ends, as torch._grouped_mm takes them).
# ---------------------------------------------------------------------------------------------


def gmm_grouped(a, b, offs):
    """torch._grouped_mm: a [M, K] x b [G, K, N] -> [M, N] (row group g times b[g]), or a [N, M] x
    b [M, K] -> [G, N, K] (group g of the shared dimension M). bf16 operands and result, fp32
    accumulation (CUTLASS on sm90). Rows past offs[-1] are left unwritten."""
    return torch._grouped_mm(a, b, offs=offs)


def gmm_loop(a, b, offs):
    """The same products as one ordinary GEMM per group (reads the group ends on the host)."""
    ends = [int(e) for e in offs.tolist()]
    starts = [0] + ends[:-1]
    if b.dim() == 3:
        out = a.new_zeros(a.shape[0], b.shape[-1])
        for g, (lo, hi) in enumerate(zip(starts, ends)):
            if hi > lo:
                out[lo:hi] = a[lo:hi] @ b[g]
        return out
    out = a.new_zeros(len(ends), a.shape[0], b.shape[1])
    for g, (lo, hi) in enumerate(zip(starts, ends)):
        if hi > lo:
            out[g] = a[:, lo:hi] @ b[lo:hi]
    return out


GMM = {"grouped_mm": gmm_grouped, "loop": gmm_loop}


def probe_grouped_mm(device):
    """Whether torch._grouped_mm runs here in the layouts the experts use (fprop, dgrad, wgrad) and
    agrees with the loop: (True, None) or (False, why)."""
    if not hasattr(torch, "_grouped_mm"):
        return False, f"torch {torch.__version__} has no torch._grouped_mm"
    try:
        gen = torch.Generator().manual_seed(0)
        rnd = lambda *shape: torch.randn(*shape, generator=gen).to(device=device, dtype=BF16)  # noqa: E731
        offs = torch.tensor([16, 48, 96], dtype=torch.int32, device=device)  # 16 rows past the end
        x, w, dy = rnd(112, 64), rnd(3, 48, 64), rnd(112, 48)
        x[96:] = 0
        dy[96:] = 0
        # fprop (W^T a view), dgrad (W as stored), wgrad in the bf16 layout (dY^T a view) and in the
        # quantized one (the copies dY^T and X^T as made, X^T's transpose a view).
        for a, b in ((x, w.transpose(1, 2)), (dy, w), (dy.t(), x), (dy.t().contiguous(), x.t().contiguous().t())):
            got, want = gmm_grouped(a, b, offs).float(), gmm_loop(a, b, offs).float()
            if got.dim() == 2:
                got, want = got[:96], want[:96]
            err = float((got - want).norm() / want.norm())
            if not err < 1e-2:
                return False, f"torch._grouped_mm differs from the loop by {err:.3g} (relative)"
    except Exception as e:  # noqa: BLE001 -- any failure means: use the loop
        return False, f"torch._grouped_mm failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return True, None


_EXPERT_PATHS = {}


def select_expert_path(requested, device):
    """The experts' GEMM path for --expert-path (auto: the grouped GEMM on a GPU when the probe
    passes, else the loop): (path, why the grouped GEMM is not used, or None)."""
    key = (requested, str(device))
    if key not in _EXPERT_PATHS:
        if requested == "loop":
            _EXPERT_PATHS[key] = ("loop", None)
        elif requested == "auto" and device.type != "cuda":
            _EXPERT_PATHS[key] = ("loop", "the CPU runs the loop")
        else:
            ok, why = probe_grouped_mm(device)
            if not ok and requested == "grouped_mm":
                sys.exit(f"peer_torch: --expert-path grouped_mm: {why}")
            if not ok:
                print(f"peer_torch: {why}; the experts run as a loop", file=sys.stderr)
            _EXPERT_PATHS[key] = ("grouped_mm", None) if ok else ("loop", why)
    return _EXPERT_PATHS[key]


def group_row_multiple(slots):
    """An expert group's rows are padded to a multiple of this: 16 (each group then starts 16-row
    aligned, as the grouped GEMM's tiles like it), or the recipe's wgrad block when larger (32 for
    mxfp4), since the wgrad copies block along the group's tokens (fp4lab's wgrad_row_multiple)."""
    m = 16
    for spec, gemm in zip(slots or (), SLOT_GEMM):
        if gemm == "wgrad":
            m = math.lcm(m, spec.block)
    return m


def _alpha(a, b):
    # The per-group alpha S_dec_A * S_dec_B of a grouped GEMM ([G]), or None when neither is e4m3x2.
    if a is None or b is None:
        return a if b is None else b
    return a * b


def _scale_groups(y, alpha, row_group):
    # e4m3x2: each group's rows (or each group's dW, y [G, N, K]) times its alpha, after the bf16 GEMM.
    if alpha is None:
        return y
    a = alpha[row_group][:, None] if row_group is not None else alpha[:, None, None]
    return (y.to(F32) * a).to(BF16)


def make_grouped_linear(slots, gmm):
    """A torch.autograd.Function for the experts' linears over the grouped buffer: y[r] = x[r] w[g]^T
    for every row r of group g, with x [M, K] (bf16), w [G, N, K] (the fp32 master weights of the G
    experts), offs [G] (int32 group ends), row_group [M] (each row's group) and live [M] (rows
    before offs[-1]; the rows after it are zeroed). fprop and dgrad are 2-D x 3-D grouped GEMMs, the
    wgrad dW[g] = dY_g^T X_g one 2-D x 2-D grouped GEMM. With a 4-bit recipe the six slots are
    quantized as the dense linear's (NUMERICS.md §1), per group: X and dY blocked along the features
    row by row, dY^T and X^T blocked along the tokens (the groups are padded to whole blocks, so no
    block spans two groups), W per expert, and e4m3x2's tensor scales per group (per expert for W),
    their product applied to the group's rows of the result."""
    if slots is None:
        fx = fw = ddy = dw_ = wdy = wx = None
        reuse_w = True
    else:
        fx, fw, ddy, dw_, wdy, wx = slots
        reuse_w = fw == dw_ and fw.tile_2d and not fw.rht and not fw.sr

    def quant(t, spec, groups=None):
        # The operand (dequantized when quantized) and its per-group S_dec ([G]; None unless e4m3x2).
        if spec is None:
            return t, None
        q, dec = fake_quant(t, spec, groups)
        return q, dec.reshape(-1) if spec.scale == "e4m3x2" else None

    class GroupedLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, offs, row_group, live):
            G = w.shape[0]
            xb, wb = x.to(BF16), w.to(BF16)
            qx, ax = quant(xb, fx, (row_group, G, 0))     # X along K, row by row
            qw, aw = quant(wb, fw)                        # each expert's W along K
            y = _scale_groups(gmm(qx, qw.transpose(1, 2), offs), _alpha(ax, aw), row_group)
            y = torch.where(live[:, None], y, torch.zeros_like(y))
            ctx.save_for_backward(xb, qw if reuse_w else wb, aw, offs, row_group, live)
            return y

        @staticmethod
        def backward(ctx, dy):                            # dy [M, N]
            xb, w_saved, aw, offs, row_group, live = ctx.saved_tensors
            G = w_saved.shape[0]
            dy = dy.to(BF16)
            # dgrad: dX = dY . W[g], reduction over N: dY along N (rows), W along N (its columns).
            qdy, ady = quant(dy, ddy, (row_group, G, 0))
            if reuse_w:
                dx = _scale_groups(gmm(qdy, w_saved, offs), _alpha(ady, aw), row_group)
            else:
                qwt, awt = quant(w_saved.transpose(1, 2), dw_)   # [G, K, N], blocked along N
                dx = _scale_groups(gmm(qdy, qwt.transpose(1, 2), offs), _alpha(ady, awt), row_group)
            dx = torch.where(live[:, None], dx, torch.zeros_like(dx))
            # wgrad: dW[g] = dY_g^T . X_g, reduction over the group's tokens: both along the tokens.
            qdyt, ady2 = quant(dy.t(), wdy, (row_group, G, 1))    # [N, M]
            qxt, ax2 = quant(xb.t(), wx, (row_group, G, 1))       # [K, M]
            dw = _scale_groups(gmm(qdyt, qxt.t(), offs), _alpha(ady2, ax2), None)
            return dx, dw.to(F32), None, None, None

    return GroupedLinear


# ---------------------------------------------------------------------------------------------
# Model (docs/model.md)
# ---------------------------------------------------------------------------------------------


MOE_BALANCE_COEF = 0.01  # engine/model/model_shape.h's kDefaultBalanceCoef (Switch Transformer)
MOE_Z_COEF = 0.001       # kDefaultZCoef (ST-MoE)


@dataclasses.dataclass
class ModelConfig:
    n_layers: int
    d_model: int
    n_heads: int
    head_dim: int
    d_ff: int
    vocab: int
    seq_len: int
    n_experts: int = 0       # E routed experts in every block's MoE block; 0: the dense model
    top_k: int = 0           # experts per token
    d_ff_expert: int = 0     # each expert's SwiGLU width
    balance_coef: float = MOE_BALANCE_COEF
    z_coef: float = MOE_Z_COEF

    @staticmethod
    def preset(name, vocab, seq_len):
        """d<L>, or fp4lab's MoE preset d<L>-e<E>k<K> (engine/model/model_shape.cpp's model_preset)."""
        m = re.fullmatch(r"d(\d+)(?:-e([1-9]\d{0,3})k([1-9]\d{0,3}))?", name)
        if not m or not 1 <= int(m.group(1)) <= 64:
            raise ValueError(f"model must be d<L> (L in 1..64) or d<L>-e<E>k<K> (e.g. d6-e8k2), got {name!r}")
        L = int(m.group(1))
        d = 64 * L
        cfg = ModelConfig(L, d, L, 64, d_ff_rule(d), vocab, seq_len)
        if m.group(2):
            E, K = int(m.group(2)), int(m.group(3))
            if not (E <= 1024 and K <= E):
                raise ValueError(f"model {name!r}: needs 1 <= top-k <= experts <= 1024")
            cfg = dataclasses.replace(cfg, n_experts=E, top_k=K, d_ff_expert=d_ff_expert_rule(cfg.d_ff, K))
        return cfg

    def _block_params(self, experts):
        # A dense block, or an MoE block whose tokens use `experts` experts (docs/model.md, "Sizes of
        # MoE models"): attention and norms 4d^2 + 2d, the router E d, 3 d f_e per expert.
        d, f = self.d_model, self.d_ff
        if not self.n_experts:
            return 4 * d * d + 3 * d * f + 2 * d
        return 4 * d * d + 2 * d + self.n_experts * d + experts * 3 * d * self.d_ff_expert

    def n_params_nonembedding(self):
        """Every parameter but the embedding and the LM head, every expert counted."""
        return self.n_layers * self._block_params(self.n_experts) + self.d_model

    def n_params_active_nonembedding(self):
        """What one token uses: the router and top_k experts per MoE block (the dense count otherwise)."""
        return self.n_layers * self._block_params(self.top_k) + self.d_model

    def n_params(self):
        return self.n_params_nonembedding() + 2 * self.vocab * self.d_model

    def n_params_active(self):
        return self.n_params_active_nonembedding() + 2 * self.vocab * self.d_model

    def flops_per_token(self):
        """fp4lab's train_flops_per_token: 6 N_active + 6 L T d."""
        return 6 * self.n_params_active_nonembedding() + 6 * self.n_layers * self.seq_len * self.d_model


def d_ff_rule(d):
    """The multiple of 64 nearest 8/3 d, a tie going up, at least 64."""
    return 64 * max(1, (8 * d + 96) // 192)


def d_ff_expert_rule(d_ff, top_k):
    """The MoE presets' expert width: d_ff / top_k to the nearest multiple of 32, a tie going up, at
    least 32 (model_shape.cpp's default_d_ff_expert)."""
    unit = 32 * max(1, top_k)
    return 32 * max(1, (d_ff + unit // 2) // unit)


def rms_norm(x, gain, eps=1e-5):
    xf = x.to(F32)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * gain).to(BF16)


def rope_tables(seq_len, head_dim, device):
    # Pair i of the token at position t turns by t * 10000^(-2i/head_dim).
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    inv_freq = 10000.0 ** (-2.0 * i / head_dim)
    ang = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(ang).to(F32).to(device), torch.sin(ang).to(F32).to(device)


def apply_rope(x, cos, sin):
    # x [B, T, H, hd]; features (2i, 2i+1) form pair i (interleaved, RoFormer / Meta LLaMA).
    B, T, H, hd = x.shape
    xp = x.to(F32).reshape(B, T, H, hd // 2, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    c, s = cos[None, :T, None, :], sin[None, :T, None, :]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.reshape(B, T, H, hd).to(BF16)


def causal_attention(q, k, v):
    # q, k, v [B, H, T, hd] bf16; scores scaled by 1/sqrt(hd) (the default).
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # torch < 2.0 (the CPU self-check only): the same math, unfused.
    T = q.shape[-2]
    att = (q.to(F32) @ k.to(F32).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    return (att @ v.to(F32)).to(BF16)


def moe_dispatch(flat, counts, m):
    """The grouped buffer for the token-expert pairs flat [R K] (pair i = t K + c: token t's c-th
    expert) with counts [E] pairs per expert. The pairs are sorted by expert, stably, so that each
    expert's group is its tokens in ascending index (fp4lab's order); group g takes rows
    offs[g] - padded[g] .. offs[g] - 1 of a buffer of static size M = R K + E m, padded with zero rows
    to whole blocks of m rows and at least one block (no shape depends on the routing, and no group
    is empty: CUTLASS's 2-D x 2-D grouped GEMM, the wgrad, may hang on a group of size 0, as noted in
    pytorch/pytorch#155466); the rows after offs[-1] are unused. Returns (pair_row [R K]: each pair's row,
    row_pair [M]: each row's pair (0 on padding), valid [M]: rows holding a pair, row_group [M],
    live [M]: rows before offs[-1], offs [E] int32: the group ends)."""
    E, RK = counts.shape[0], flat.shape[0]
    M, dev = RK + E * m, flat.device
    order = torch.sort(flat, stable=True).indices
    padded = torch.div(counts + (m - 1), m, rounding_mode="floor").clamp(min=1) * m
    ends = torch.cumsum(padded, 0)
    first = ends - padded - (torch.cumsum(counts, 0) - counts)     # group start minus its first sorted pair
    rows = first.index_select(0, flat.index_select(0, order)) + torch.arange(RK, device=dev)
    pair_row = torch.empty_like(order).scatter_(0, order, rows)
    row_pair = torch.zeros(M, dtype=torch.int64, device=dev).scatter_(0, rows, order)
    valid = torch.zeros(M, dtype=torch.bool, device=dev).scatter_(0, rows, torch.ones_like(rows, dtype=torch.bool))
    row_index = torch.arange(M, device=dev)
    row_group = torch.searchsorted(ends, row_index, right=True).clamp(max=E - 1)
    return pair_row, row_pair, valid, row_group, row_index < ends[-1], ends.to(torch.int32)


class MoE(nn.Module):
    """An MoE block's MLP part (docs/model.md, "Mixture of experts"; engine/model/moe_block.cpp):
    router, dropless dispatch into the grouped buffer, the experts, combine. Returns the output and
    the block's auxiliary loss (balance_coef * balance + z_coef * z)."""

    def __init__(self, cfg, glinear, row_multiple):
        super().__init__()
        E, d, fe = cfg.n_experts, cfg.d_model, cfg.d_ff_expert
        self.n_experts, self.top_k, self.d_ff_expert = E, cfg.top_k, fe
        self.renormalize = cfg.top_k > 1
        self.balance_coef, self.z_coef = cfg.balance_coef, cfg.z_coef
        self.row_multiple = row_multiple
        self.router = nn.Parameter(torch.empty(E, d))
        self.experts_in = nn.Parameter(torch.empty(E, 2 * fe, d))   # per expert: rows gate | up
        self.experts_out = nn.Parameter(torch.empty(E, d, fe))
        self.glinear = glinear

    def forward(self, h):
        B, T, d = h.shape
        R, E, K, m = B * T, self.n_experts, self.top_k, self.row_multiple
        dev = h.device
        h2 = h.reshape(R, d)
        # Router: fp32 logits from the fp32 master weights, never quantized, outside autocast.
        with torch.autocast(device_type=dev.type, enabled=False):
            logits = h2.to(F32) @ self.router.t()
        probs = logits.softmax(-1)
        chosen = logits.topk(K, dim=-1).indices.sort(dim=-1).values   # [R, K], ascending expert index
        g = probs.gather(1, chosen)
        gates = g / g.sum(-1, keepdim=True) if self.renormalize else g
        flat = chosen.reshape(-1)                                      # pair i = t K + c
        counts = torch.zeros(E, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
        # Auxiliary losses: E sum_i f_i P_i (f a count, no gradient) and mean_t logsumexp(z_t)^2.
        balance = E * ((counts.to(F32) / (R * K)) * probs.mean(0)).sum()
        z = torch.logsumexp(logits, -1).square().mean()
        aux = self.balance_coef * balance + self.z_coef * z

        # Dispatch, then gather through the pair layout (row i of h_pairs is token i // K): the
        # backward adds each row's gradient to its own pair, then sums a token's K pairs in order.
        pair_row, row_pair, valid, row_group, live, offs = moe_dispatch(flat, counts, m)
        h_pairs = h2.unsqueeze(1).expand(R, K, d).reshape(R * K, d)
        x = h_pairs.index_select(0, row_pair)
        x = torch.where(valid[:, None], x, torch.zeros_like(x))

        # The experts: SwiGLU, each linear one grouped GEMM per pass.
        u = self.glinear.apply(x, self.experts_in, offs, row_group, live)
        gate, up = u.split(self.d_ff_expert, dim=-1)
        a = (F.silu(gate.to(F32)) * up.to(F32)).to(BF16)
        y = self.glinear.apply(a, self.experts_out, offs, row_group, live)

        # Combine: sum_c gate_c y_c over the token's experts in ascending index, fp32, stored bf16.
        yk = y.index_select(0, pair_row).reshape(R, K, d)
        out = (yk.to(F32) * gates.unsqueeze(-1)).sum(1).to(BF16)
        return out.reshape(B, T, d), aux


class Block(nn.Module):
    def __init__(self, cfg, qlinear, glinear=None, row_multiple=16):
        super().__init__()
        d, f = cfg.d_model, cfg.d_ff
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.qkv = nn.Parameter(torch.empty(3 * d, d))        # rows q | k | v, head h at h * hd
        self.attn_out = nn.Parameter(torch.empty(d, d))
        self.mlp_norm = nn.Parameter(torch.ones(d))
        if cfg.n_experts:
            self.moe = MoE(cfg, glinear, row_multiple)        # instead of the SwiGLU MLP
        else:
            self.moe = None
            self.mlp_in = nn.Parameter(torch.empty(2 * f, d))     # rows gate | up
            self.mlp_out = nn.Parameter(torch.empty(d, f))
        self.qlinear = qlinear                                # None: bf16 (autocast F.linear)

    def linear(self, x, w):
        if self.qlinear is None:
            return F.linear(x, w)
        lead = x.shape[:-1]
        y = self.qlinear.apply(x.reshape(-1, x.shape[-1]), w)  # tokens of the micro-batch = T
        return y.reshape(*lead, w.shape[0])

    def forward(self, x, cos, sin):
        B, T, d = x.shape
        H, hd = self.n_heads, self.head_dim
        qkv = self.linear(rms_norm(x, self.attn_norm), self.qkv).to(BF16)
        q, k, v = qkv.split(d, dim=-1)
        q = apply_rope(q.reshape(B, T, H, hd), cos, sin).transpose(1, 2)
        k = apply_rope(k.reshape(B, T, H, hd), cos, sin).transpose(1, 2)
        v = v.reshape(B, T, H, hd).transpose(1, 2)
        a = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, d)
        x = (x + self.linear(a, self.attn_out)).to(BF16)
        if self.moe is not None:                              # (x'', this block's auxiliary loss)
            y, aux = self.moe(rms_norm(x, self.mlp_norm))
            return (x + y).to(BF16), aux
        gu = self.linear(rms_norm(x, self.mlp_norm), self.mlp_in)
        gate, up = gu.split(gu.shape[-1] // 2, dim=-1)
        h = (F.silu(gate.to(F32)) * up.to(F32)).to(BF16)
        return (x + self.linear(h, self.mlp_out)).to(BF16)


class Head(nn.Module):
    """Final RMSNorm, untied LM head and mean cross-entropy (nats per token)."""

    def __init__(self, cfg):
        super().__init__()
        self.final_norm = nn.Parameter(torch.ones(cfg.d_model))
        self.lm_head = nn.Parameter(torch.empty(cfg.vocab, cfg.d_model))

    def forward(self, x, targets):
        logits = F.linear(rms_norm(x, self.final_norm), self.lm_head)
        return F.cross_entropy(logits.to(F32).reshape(-1, logits.shape[-1]), targets.reshape(-1))


class Transformer(nn.Module):
    def __init__(self, cfg, recipe, expert_path="loop"):
        super().__init__()
        self.cfg = cfg
        slots = PRESETS[recipe]
        qlinear = make_quantized_linear(slots) if slots is not None else None
        # One Function class for every block's experts, so that the compiled blocks share code.
        glinear = make_grouped_linear(slots, GMM[expert_path]) if cfg.n_experts else None
        self.expert_path = expert_path if cfg.n_experts else None
        self.tok_emb = nn.Parameter(torch.empty(cfg.vocab, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg, qlinear, glinear, group_row_multiple(slots))
                                    for _ in range(cfg.n_layers))
        self.head = Head(cfg)
        self.ce_loss = self.aux_loss = None  # an MoE model's last forward: its two parts, detached
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        std_out = 0.02 / math.sqrt(2 * self.cfg.n_layers)  # GPT-2's residual scaling
        nn.init.normal_(self.tok_emb, std=0.02)
        nn.init.normal_(self.head.lm_head, std=0.02)
        for b in self.blocks:
            nn.init.normal_(b.qkv, std=0.02)
            # Every expert's mlp_in and mlp_out as the dense ones (each expert's slice of the stack).
            nn.init.normal_(b.mlp_in if b.moe is None else b.moe.experts_in, std=0.02)
            nn.init.normal_(b.attn_out, std=std_out)
            nn.init.normal_(b.mlp_out if b.moe is None else b.moe.experts_out, std=std_out)
            if b.moe is not None:
                nn.init.normal_(b.moe.router, std=0.02)

    def compile_parts(self):
        # One compiled region per block rather than one for the whole model: every block runs the
        # same code on same-shaped tensors, so Dynamo compiles it once (parameters are graph
        # inputs) and compile time does not grow with depth. The head + loss is a second region.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        if hasattr(torch._dynamo.config, "accumulated_cache_size_limit"):
            torch._dynamo.config.accumulated_cache_size_limit = max(
                torch._dynamo.config.accumulated_cache_size_limit, 512)
        if hasattr(nn.Module, "compile"):  # torch >= 2.2: compiled in place, parameters keep their names
            for b in self.blocks:
                b.compile()
            self.head.compile()
        else:
            for i, b in enumerate(self.blocks):
                self.blocks[i] = torch.compile(b)
            self.head = torch.compile(self.head)

    def forward(self, idx, targets, cos, sin):
        """The training objective: the mean cross-entropy, plus the MoE blocks' auxiliary losses in an
        MoE model (which leaves the two parts, detached, in self.ce_loss and self.aux_loss)."""
        x = F.embedding(idx, self.tok_emb).to(BF16)
        aux = None
        for b in self.blocks:
            x = b(x, cos, sin)
            if isinstance(x, tuple):
                x, a = x
                aux = a if aux is None else aux + a
        loss = self.head(x, targets)
        if aux is None:
            return loss
        self.ce_loss, self.aux_loss = loss.detach(), aux.detach()
        return loss + aux


def param_groups(model, weight_decay):
    """Weight decay on every matrix (embedding, block linears, LM head), never on norm gains."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_adamw(model, lr, device):
    groups = param_groups(model, 0.1)
    kw = dict(lr=lr, betas=(0.9, 0.95), eps=1e-8)
    if device.type == "cuda":
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, **kw), "default"


def lr_at(i, total, warmup, peak, floor):
    """docs/train.md: linear warmup over `warmup` steps, then cosine from peak to floor."""
    if i < warmup:
        return peak * (i + 1) / warmup
    return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * (i - warmup) / max(1, total - warmup)))


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------


class Timer:
    """Wall time of queued device work: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def start(self):
        if self.cuda:
            self.begin = torch.cuda.Event(enable_timing=True)
            self.begin.record()
        else:
            self.begin = time.perf_counter()

    def seconds(self):
        if not self.cuda:
            return time.perf_counter() - self.begin
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return self.begin.elapsed_time(end) / 1e3


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bf16_gemm_tflops(device, n=8192, iters=30):
    """The dense bf16 GEMM rate of this device in this process (n x n x n), in TFLOP/s."""
    a = torch.randn(n, n, device=device, dtype=BF16)
    b = torch.randn(n, n, device=device, dtype=BF16)
    c = torch.empty(n, n, device=device, dtype=BF16)
    for _ in range(3):
        torch.mm(a, b, out=c)
    synchronize(device)
    timer = Timer(device)
    timer.start()
    for _ in range(iters):
        torch.mm(a, b, out=c)
    seconds = timer.seconds()
    del a, b, c
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2.0 * n ** 3 * iters / seconds / 1e12


def run_config(args, model_name, recipe, device, gemm_tflops):
    cfg = ModelConfig.preset(model_name, args.vocab, args.seq_len)
    tokens_micro = args.micro_batch * args.seq_len
    if args.batch_tokens % tokens_micro:
        raise ValueError(f"batch_tokens {args.batch_tokens} is not a multiple of micro_batch * seq_len = {tokens_micro}")
    accum = args.batch_tokens // tokens_micro
    if PRESETS[recipe] is not None:
        # Every blocked dimension must hold whole blocks (NUMERICS.md §1).
        block = max(s.block for s in PRESETS[recipe])
        mlp = (cfg.d_ff_expert, "d_ff_expert") if cfg.n_experts else (cfg.d_ff, "d_ff")
        for dim, name in ((cfg.d_model, "d_model"), mlp, (tokens_micro, "micro_batch * seq_len")):
            if dim % block:
                raise ValueError(f"{name} = {dim} is not a multiple of the block size {block}")
    expert_path, expert_note = select_expert_path(args.expert_path, device) if cfg.n_experts else (None, None)

    torch.manual_seed(args.seed)
    model = Transformer(cfg, recipe, expert_path or "loop").to(device)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == cfg.n_params(), (n_params, cfg.n_params())
    opt, opt_kind = make_adamw(model, args.lr, device)
    cos, sin = rope_tables(cfg.seq_len, cfg.head_dim, device)
    # Random tokens, uniform over the vocabulary, made once on the GPU: one step's micro-batches,
    # reused every step (their content does not change the amount of work).
    data = torch.randint(0, cfg.vocab, (accum, args.micro_batch, cfg.seq_len + 1), device=device)
    compiled = bool(args.compile)
    total_steps = args.warmup + args.steps
    warmup_lr = max(1, total_steps // 20)
    params = list(model.parameters())

    def train_step(i):
        for g in opt.param_groups:
            g["lr"] = lr_at(i, total_steps, warmup_lr, args.lr, args.lr / 10)
        loss_sum = torch.zeros((), device=device)
        aux_sum = torch.zeros((), device=device)
        for k in range(accum):
            with torch.autocast(device_type=device.type, dtype=BF16):
                loss = model(data[k, :, :-1], data[k, :, 1:], cos, sin)
            (loss / accum).backward()
            if model.aux_loss is None:
                loss_sum += loss.detach()
            else:  # an MoE model: report the cross-entropy alone, as fp4lab does
                loss_sum += model.ce_loss
                aux_sum += model.aux_loss
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss_sum / accum, aux_sum / accum

    t0 = time.time()
    try:
        if compiled:
            model.compile_parts()
        for i in range(args.warmup):
            train_step(i)
        synchronize(device)
    except Exception as e:  # a compiler failure should still leave an eager measurement behind
        if not compiled:
            raise
        traceback.print_exc(file=sys.stderr)
        compile_error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        print(f"peer_torch: torch.compile failed for {model_name}/{recipe}; measuring eager", file=sys.stderr)
        if hasattr(torch, "_dynamo"):
            torch._dynamo.reset()
        return run_config(argparse.Namespace(**{**vars(args), "compile": False}), model_name, recipe,
                          device, gemm_tflops) | {"compile_error": compile_error}
    warmup_s = time.time() - t0

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    timer = Timer(device)
    timer.start()
    for i in range(args.warmup, total_steps):
        loss, aux = train_step(i)
    seconds = timer.seconds()
    tokens_per_s = args.batch_tokens * args.steps / seconds
    fpt = cfg.flops_per_token()
    graphs = {}
    if compiled:
        # Compiled regions and graph breaks: a break inside a block would leave part of it eager.
        from torch._dynamo.utils import counters
        graphs = {"compiled_graphs": int(counters["stats"].get("unique_graphs", 0)),
                  "graph_breaks": int(sum(counters["graph_break"].values()))}
        counters.clear()  # the counters are process-wide: count each (model, recipe) pair alone
    row = {
        "model": model_name, "recipe": recipe,
        "n_layers": cfg.n_layers, "d_model": cfg.d_model, "d_ff": cfg.d_ff, "vocab": cfg.vocab,
        "seq_len": cfg.seq_len, "micro_batch": args.micro_batch, "batch_tokens": args.batch_tokens,
        "grad_accum": accum, "steps": args.steps, "warmup": args.warmup,
        "compiled": compiled, "optimizer": f"adamw-{opt_kind}",
        "n_params": n_params, "n_params_nonembedding": cfg.n_params_nonembedding(),
        "n_experts": cfg.n_experts, "top_k": cfg.top_k, "d_ff_expert": cfg.d_ff_expert,
        "n_params_active": cfg.n_params_active(), "n_params_active_nonembedding": cfg.n_params_active_nonembedding(),
        "expert_path": expert_path,
        "flops_per_token": fpt,
        "tokens_per_s": round(tokens_per_s, 1), "step_ms": round(1e3 * seconds / args.steps, 3),
        "peak_mem_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "bf16_gemm_tflops": float(f"{gemm_tflops:.4g}"),  # significant digits: a CPU's rate is < 0.01
        "mfu": round(fpt * tokens_per_s / (gemm_tflops * 1e12), 4),
        "final_loss": round(float(loss), 4), "warmup_s": round(warmup_s, 1),
        "device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
    }
    if cfg.n_experts:
        row["final_aux_loss"] = round(float(aux), 5)  # sum over the MoE blocks, coefficients applied
        if expert_note:
            row["expert_path_note"] = expert_note
    row.update(graphs)
    return row


def bench(args):
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("peer_torch: no CUDA GPU here (--check is the CPU self-check; --device cpu tries the harness)")
    torch.backends.cuda.matmul.allow_tf32 = False  # every fp32 product stays fp32
    n = 8192 if device.type == "cuda" else 512
    gemm = bf16_gemm_tflops(device, n)
    print(f"peer_torch: bf16 GEMM {n}^3: {gemm:.1f} TFLOP/s", file=sys.stderr)
    t_start = time.time()
    for model_name in args.model.split(","):
        for recipe in args.recipe.split(","):
            if recipe not in PRESETS:
                sys.exit(f"peer_torch: unknown recipe {recipe!r} (known: {', '.join(PRESETS)})")
            if args.time_budget and time.time() - t_start > args.time_budget:
                print(f"peer_torch: time budget spent, skipping {model_name}/{recipe}", file=sys.stderr)
                continue
            row = run_config(args, model_name, recipe, device, gemm)
            line = json.dumps(row)
            print(line, flush=True)
            experts = f", experts {row['expert_path']}" if row["expert_path"] else ""
            print(f"peer_torch: {model_name} {recipe}: {row['tokens_per_s']:.0f} tok/s, {row['step_ms']:.1f} ms/step, "
                  f"MFU {100 * row['mfu']:.1f}%, compiled {row['compiled']}{experts}, warmup {row['warmup_s']} s",
                  file=sys.stderr, flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(line + "\n")
            if hasattr(torch, "_dynamo"):
                torch._dynamo.reset()  # the next pair compiles from scratch, caches do not pile up
            if device.type == "cuda":
                torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# --check: CPU self-check of the quantizer and the model (seconds, no GPU, no compile)
# ---------------------------------------------------------------------------------------------


def _f32_bits(x):
    return int(torch.tensor([x], dtype=F32).view(torch.int32)[0]) & 0xFFFFFFFF


def _row(values, block=16):
    # One row of bf16 values padded with zeros to a whole block.
    v = list(values) + [0.0] * (-len(values) % block)
    return torch.tensor([v], dtype=F32).to(BF16)


def _parts(values, spec):
    v, q, s, dec = quantize_parts(_row(values, spec.block), spec)
    return q.reshape(-1), s.reshape(-1), dec


def moe_reference(moe, h):
    """An MoE block's output [R, d] and auxiliary loss computed the plain way, in fp32: every expert
    on every token, weighted by the token's gate (0 where the expert was not chosen)."""
    E, K = moe.n_experts, moe.top_k
    h2 = h.reshape(-1, h.shape[-1]).to(F32)
    logits = h2 @ moe.router.t()
    probs = torch.softmax(logits, -1)
    chosen = logits.topk(K, dim=-1).indices
    g = probs.gather(1, chosen)
    if moe.renormalize:
        g = g / g.sum(-1, keepdim=True)
    weight = torch.zeros_like(probs).scatter(1, chosen, g)            # [R, E]
    out = torch.zeros_like(h2)
    for e in range(E):
        w_in, w_out = moe.experts_in[e].to(BF16).to(F32), moe.experts_out[e].to(BF16).to(F32)
        gate, up = (h2 @ w_in.t()).split(moe.d_ff_expert, dim=-1)
        out = out + weight[:, e:e + 1] * ((F.silu(gate) * up) @ w_out.t())
    f = F.one_hot(chosen, E).sum(1).sum(0).to(F32) / chosen.numel()
    balance = E * (f * probs.mean(0)).sum()
    z = (torch.logsumexp(logits, -1) ** 2).mean()
    return out, moe.balance_coef * balance + moe.z_coef * z


def check_moe(ok):
    """The MoE blocks: sizes against docs/model.md, the dispatch, the grouped quantizer, the block
    against a plain fp32 reference, and a one-expert model against the dense one."""
    # Sizes and counts against docs/model.md's MoE table (V = 256, FLOPs at T = 256).
    table = {"d4-e8k2": (352, 9709824, 9840896, 3221760, 3352832, 20903424),
             "d6-e8k2": (512, 31873920, 32070528, 10640256, 10836864, 67380480)}
    for name, want in table.items():
        c = ModelConfig.preset(name, 256, 256)
        got = (c.d_ff_expert, c.n_params_nonembedding(), c.n_params(), c.n_params_active_nonembedding(),
               c.n_params_active(), c.flops_per_token())
        ok(got == want, f"{name} counts {got}")
    ok(sum(p.numel() for p in Transformer(ModelConfig.preset("d6-e8k2", 256, 256), "bf16").parameters()) == 32070528,
       "d6-e8k2 module parameter count")
    c = ModelConfig.preset("d12-e32k2", 256, 1024)
    ok((c.d_ff_expert, c.n_experts, c.top_k) == (1024, 32, 2), "d12-e32k2 shape")
    ok(d_ff_expert_rule(320, 2) == 160 and d_ff_expert_rule(704, 4) == 192 and d_ff_expert_rule(40, 2) == 32,
       "d_ff_expert rule (nearest multiple of 32, ties up, at least 32)")
    for bad in ("d6-e8", "d6-e2k3", "d6-e0k1", "d6-e08k2"):
        try:
            ModelConfig.preset(bad, 256, 256)
            ok(False, f"preset {bad} accepted")
        except ValueError:
            ok(True, "")

    # Dispatch: each group holds its tokens in ascending order from a multiple of m, zero-padded to
    # whole blocks (at least one), and the pair <-> row maps are inverse.
    torch.manual_seed(2)
    R, E, K, m = 48, 5, 2, 16
    chosen = torch.rand(R, E).topk(K, dim=-1).indices.sort(dim=-1).values
    chosen[:, 0] = torch.where(chosen[:, 0] == 3, torch.zeros_like(chosen[:, 0]), chosen[:, 0])  # keep 3 rare
    chosen[:, 1] = torch.where(chosen[:, 1] == 3, torch.full_like(chosen[:, 1], 4), chosen[:, 1])
    chosen = chosen.sort(dim=-1).values
    flat = chosen.reshape(-1)
    counts = torch.bincount(flat, minlength=E)
    pair_row, row_pair, valid, row_group, live, offs = moe_dispatch(flat, counts, m)
    ends = offs.tolist()
    starts = [0] + ends[:-1]
    ok(all((hi - lo) % m == 0 and hi - lo >= max(m, int(n)) for lo, hi, n in zip(starts, ends, counts)),
       f"dispatch group sizes {ends}")
    ok(torch.equal(row_pair[pair_row], torch.arange(R * K)) and int(valid.sum()) == R * K, "dispatch maps")
    for e, (lo, hi) in enumerate(zip(starts, ends)):
        rows = torch.arange(lo, hi)
        n = int(counts[e])
        toks = (row_pair[rows[:n]] // K).tolist()
        ok(toks == sorted(toks) and toks == [t for t in range(R) if e in chosen[t].tolist()]
           and bool(valid[rows[:n]].all()) and not bool(valid[rows[n:]].any())
           and bool((row_group[rows] == e).all()), f"dispatch group {e}")
    ok(not bool(live[ends[-1]:].any()) and bool(live[:ends[-1]].all()), "dispatch live rows")

    # The grouped quantizer: per-group e4m3x2 tensor scales equal quantizing each group alone, for
    # groups of rows (blocks along the features) and of columns (blocks along the tokens); weights
    # [G, N, K] (2D tiles too) equal each expert alone.
    nv = PRESETS["nvfp4"]
    x = (torch.randn(64, 96) * torch.exp(torch.randn(64, 1))).to(BF16)
    gid = torch.tensor([0] * 16 + [2] * 32 + [3] * 16)
    for axis, t in ((0, x), (1, x.t().contiguous())):
        q, dec = fake_quant(t, nv[0], (gid, 4, axis))
        same = True
        for g in (0, 2, 3):
            sel = (gid == g).nonzero().reshape(-1)
            part = t.index_select(axis, sel)
            qg, decg = fake_quant(part, nv[0])
            same &= torch.equal(q.index_select(axis, sel), qg) and float(dec[g]) == float(decg)
        ok(same and float(dec[1]) == 1.0, f"grouped e4m3x2 quantizer, groups along axis {axis}")
    w = (torch.randn(3, 32, 64) * torch.tensor([1.0, 30.0, 0.01])[:, None, None]).to(BF16)
    for spec in (nv[1], nv[0]):  # 16x16 tiles, and 1 x 16 blocks
        q, dec = fake_quant(w, spec)
        alone = [fake_quant(w[g], spec) for g in range(3)]
        ok(all(torch.equal(q[g], qg) and float(dec.reshape(-1)[g]) == float(dg) for g, (qg, dg) in enumerate(alone)),
           f"per-expert weights (tile_2d {spec.tile_2d})")

    # The grouped linear under each recipe: close to the exact per-group products, gradients
    # straight-through (the loop path on the layout above, with d = 64 features in, 32 out).
    rows = row_pair.shape[0]
    for name in ("bf16", "e2m1", "ufp4", "nvfp4", "mxfp4"):
        slots = PRESETS[name]
        mm = group_row_multiple(slots)
        pr, rp, vd, rg, lv, of = moe_dispatch(flat, counts, mm)
        fn = make_grouped_linear(slots, gmm_loop)
        xg = torch.where(vd[:, None], torch.randn(rp.shape[0], 64), torch.zeros(()))
        xg.requires_grad_(True)
        w = (torch.randn(E, 32, 64) * 0.1).requires_grad_(True)
        y = fn.apply(xg, w, of, rg, lv)
        xr, wr = xg.detach().to(BF16).to(F32), w.detach().to(BF16).to(F32)
        y_ref = torch.einsum("rk,rnk->rn", xr, wr[rg])
        dy = torch.where(vd[:, None], torch.randn(y.shape), torch.zeros(()))
        y.backward(dy.to(BF16))
        dyr = dy.to(BF16).to(F32)
        dx_ref = torch.einsum("rn,rnk->rk", dyr, wr[rg])
        dw_ref = torch.zeros(E, 32, 64).index_add_(0, rg, dyr[:, :, None] * xr[:, None, :])
        rel = lambda a, b: float((a.to(F32) - b).norm() / b.norm())  # noqa: E731
        tol = 0.01 if slots is None else 0.25
        ok(y.dtype == BF16 and rel(y, y_ref) < tol, f"{name} grouped fprop error {rel(y, y_ref)}")
        ok(rel(xg.grad, dx_ref) < tol, f"{name} grouped dgrad error {rel(xg.grad, dx_ref)}")
        ok(w.grad.dtype == F32 and rel(w.grad, dw_ref) < tol, f"{name} grouped wgrad error {rel(w.grad, dw_ref)}")
        ok(float(w.grad[3].abs().sum()) == 0 or int(counts[3]) > 0, f"{name} an unchosen expert gets no gradient")

    # The block against the fp32 reference: output, auxiliary loss and every gradient (bf16).
    torch.manual_seed(3)
    cfg = ModelConfig(1, 64, 1, 64, d_ff_rule(64), 64, 32, n_experts=4, top_k=2, d_ff_expert=96)
    model = Transformer(cfg, "bf16")
    moe = model.blocks[0].moe
    with torch.no_grad():
        moe.router.normal_(std=0.5)  # a router that discriminates, so that a rounding cannot flip a choice
    h = torch.randn(2, 32, 64).to(BF16).requires_grad_(True)
    probe = torch.randn(64, 64)
    paths = {"loop": gmm_loop}
    if probe_grouped_mm(torch.device("cpu"))[0]:  # a torch whose CPU build has the grouped GEMM
        paths["grouped_mm"] = gmm_grouped
    grads = {}
    for path, gmm in paths.items():
        moe.glinear = make_grouped_linear(None, gmm)
        with torch.autocast(device_type="cpu", dtype=BF16):
            out, aux = moe(h)
        (out.reshape(64, 64).to(F32) * probe).sum().add(aux).backward()
        grads[path] = [t.grad.clone() for t in (h, moe.router, moe.experts_in, moe.experts_out)]
        for t in (h, moe.router, moe.experts_in, moe.experts_out):
            t.grad = None
    ref = MoE(cfg, None, 16)
    ref.router, ref.experts_in, ref.experts_out = (nn.Parameter(t.detach().clone())
                                                   for t in (moe.router, moe.experts_in, moe.experts_out))
    ref_params = [h.detach().clone().requires_grad_(True), ref.router, ref.experts_in, ref.experts_out]
    out_ref, aux_ref = moe_reference(ref, ref_params[0])
    (out_ref * probe).sum().add(aux_ref).backward()
    rel = lambda a, b: float((a.to(F32) - b).norm() / b.norm())  # noqa: E731
    ok(rel(out.reshape(64, 64), out_ref) < 0.01 and abs(float(aux) - float(aux_ref)) < 1e-6 * float(aux_ref),
       f"MoE block vs reference: out {rel(out.reshape(64, 64), out_ref)}, aux {float(aux)} vs {float(aux_ref)}")
    for path, gs in grads.items():
        for what, g, r in zip(("dh", "d router", "d experts_in", "d experts_out"), gs, ref_params):
            ok(rel(g, r.grad) < 0.02, f"MoE block ({path}) {what} vs reference: {rel(g, r.grad)}")
    if "grouped_mm" in grads:
        ok(all(rel(a, b) < 0.01 for a, b in zip(grads["grouped_mm"], grads["loop"])), "grouped_mm vs loop")

    # One expert at the dense width, top-1, z_coef 0 is the dense model: the same forward values
    # under every recipe's RN fprop, and in bf16 the same gradients (the router's exactly zero).
    dense_cfg = ModelConfig(1, 64, 1, 64, 192, 64, 32)
    one_cfg = dataclasses.replace(dense_cfg, n_experts=1, top_k=1, d_ff_expert=192, z_coef=0.0)
    cos, sin = rope_tables(32, 64, "cpu")
    data = torch.randint(0, 64, (2, 33))
    for name in ("bf16", "e2m1", "ufp4", "nvfp4"):
        torch.manual_seed(4)
        dense, one = Transformer(dense_cfg, name), Transformer(one_cfg, name)
        with torch.no_grad():
            for p in ("tok_emb", "head.lm_head", "blocks.0.qkv", "blocks.0.attn_out"):
                one.get_parameter(p).copy_(dense.get_parameter(p))
            one.blocks[0].moe.experts_in[0].copy_(dense.blocks[0].mlp_in)
            one.blocks[0].moe.experts_out[0].copy_(dense.blocks[0].mlp_out)
        with torch.autocast(device_type="cpu", dtype=BF16):
            ld = dense(data[:, :-1], data[:, 1:], cos, sin)
            lo = one(data[:, :-1], data[:, 1:], cos, sin)
        alpha = float(torch.tensor(one_cfg.balance_coef, dtype=F32))  # balance = 1 exactly with one expert
        ok(float(ld) == float(one.ce_loss) and float(one.aux_loss) == alpha,
           f"{name}: one expert = dense: loss {float(ld)} vs {float(one.ce_loss)}, aux {float(one.aux_loss)}")
        if name == "bf16":
            ld.backward()
            lo.backward()
            same = all(torch.equal(dense.get_parameter(p).grad, one.get_parameter(p).grad)
                       for p in ("tok_emb", "head.lm_head", "blocks.0.qkv", "blocks.0.attn_out"))
            same &= torch.equal(dense.blocks[0].mlp_in.grad, one.blocks[0].moe.experts_in.grad[0])
            same &= torch.equal(dense.blocks[0].mlp_out.grad, one.blocks[0].moe.experts_out.grad[0])
            ok(same and float(one.blocks[0].moe.router.grad.abs().sum()) == 0, "bf16: one expert = dense: gradients")


def check():
    torch.manual_seed(0)
    n_checks = 0

    def ok(cond, what):
        nonlocal n_checks
        if not cond:
            raise AssertionError(what)
        n_checks += 1

    e2m1 = SlotSpec("e2m1", 6.0)
    e1m2 = SlotSpec("e1m2", 7.0)

    # Grids: every grid value is a fixed point when the block scale is exactly 1.
    grid = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -1, -1.5, -2, -3, -4, -6, 0]
    q, s, _ = _parts(grid, e2m1)
    ok(float(s[0]) == 1.0 and q.tolist() == grid, f"e2m1 grid values: {q.tolist()}")
    ints = [0, 1, 2, 3, 4, 5, 6, 7, -1, -2, -3, -4, -5, -6, -7, 0]
    q, s, _ = _parts(ints, e1m2)
    ok(float(s[0]) == 1.0 and q.tolist() == ints, f"e1m2 grid values: {q.tolist()}")

    # RN ties to the even code (NUMERICS.md §2), with amax 6 (e2m1) / 7 (e1m2) so that s = 1.
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -2.5, 0.3, 2.6, 4.9, 5.1, 6]
    q, _, _ = _parts(ties, e2m1)
    want = [0, 1, 1, 2, 2, 4, 4, -0.0, -2, 0.5, 3, 4, 6, 6]
    ok(q.tolist()[:14] == want, f"e2m1 ties: {q.tolist()[:14]}")
    ties = [0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, -0.5, -3.5, 6.9, 7]
    q, _, _ = _parts(ties, e1m2)
    ok(q.tolist()[:11] == [0, 2, 2, 4, 4, 6, 6, -0.0, -4, 7, 7], f"e1m2 ties: {q.tolist()[:11]}")
    # Clip 4 (G_max = 4): s = 12 / 4 = 3; 12 -> 4, 7 / 3 = 2.33 -> 2, 5 / 3 = 1.67 -> 1.5.
    q, s, _ = _parts([12, 7, 5], SlotSpec("e2m1", 4.0))
    ok(float(s[0]) == 3.0 and q.tolist()[:3] == [4, 2, 1.5], f"e2m1 clip 4: s {float(s[0])} q {q.tolist()[:3]}")
    # Saturation: anything at or above G_max gives G_max.
    x = torch.tensor([6.0, 6.5, 100.0, float("inf")])
    ok(round_to_grid(x, e2m1).tolist() == [6] * 4 and round_to_grid(x + 1, e1m2).tolist() == [7] * 4, "RN saturates")

    # fp32 scale: s = amax_b / G_max with IEEE division; fp32(1/6) = 0x3E2AAAAB.
    _, s, _ = _parts([1.0], e2m1)
    ok(_f32_bits(float(s[0])) == 0x3E2AAAAB, f"fp32 scale of amax 1: {_f32_bits(float(s[0])):#x}")
    _, s, _ = _parts([3.5], e1m2)
    ok(float(s[0]) == 0.5, "fp32 scale 3.5 / 7")
    out, _ = fake_quant(_row([1.0, 0.4, -0.2]), e2m1)
    # 1 -> 6 * fp32(1/6) = 1; 0.4 * 6 = 2.4 -> 2 -> bf16(2/6); -0.2 * 6 = -1.2 -> -1 -> bf16(-1/6).
    ok(out[0, :3].to(F32).tolist() == [1.0, float(torch.tensor(2 / 6).to(BF16)), float(torch.tensor(-1 / 6).to(BF16))],
       f"fp32 dequantized: {out[0, :3].tolist()}")
    z, _ = fake_quant(torch.zeros(1, 16, dtype=BF16), e2m1)
    ok(not torch.isnan(z.to(F32)).any() and float(z.abs().sum()) == 0, "all-zero block -> 0")

    # E4M3 rounding (kernels/numerics.h, tests/test_scales.cpp).
    cases = {448: 448, 449: 448, 464: 448, 1e30: 448, float("inf"): 448, 2.0 ** -9: 2.0 ** -9,
             2.0 ** -10: 0, 1.5 * 2.0 ** -9: 2.0 ** -8, 7.5 * 2.0 ** -9: 2.0 ** -6, 17: 16, 19: 20,
             18.5: 18, 15.5: 16, 248: 256, 240: 240, 0.1: 0.1015625, 1.0625: 1, 1.1875: 1.25, 0: 0,
             1e-45: 0}
    a = torch.tensor(list(cases.keys()), dtype=F32)
    r = e4m3_rn_satfinite(a).tolist()
    ok(r == [float(x) for x in cases.values()], f"e4m3 rn satfinite: {r}")
    ok(torch.isnan(e4m3_rn_satfinite(torch.tensor([float("nan")]))).all(), "e4m3 NaN")
    if hasattr(torch, "float8_e4m3fn"):
        # Cross-check against torch's own E4M3 cast on a dense sweep (it does not saturate, so clamp).
        x = torch.cat([torch.logspace(-12, 9, 200001, base=2.0), torch.arange(0, 512, 0.0625)]).to(F32)
        ref = x.clamp(max=448.0).to(torch.float8_e4m3fn).to(F32)
        ok(torch.equal(e4m3_rn_satfinite(x), ref), "e4m3 vs torch.float8_e4m3fn")

    # e4m3x2 (tests/test_scales.cpp): amax_t = 448 -> S_enc = 6, S_dec = fp32(1/6); s_b = E4M3 of
    # amax_b (S_enc * fp32(1/6) rounds to 1): 17 -> 16 (tie to even), 19 -> 20, 18.5 -> 18.
    nv = SlotSpec("e2m1", 6.0, "e4m3x2")
    t = torch.zeros(1, 64)
    t[0, 0], t[0, 16], t[0, 32], t[0, 48] = 448, 17, 19, 18.5
    _, _, s, dec = quantize_parts(t.to(BF16), nv)
    ok(s.reshape(-1).tolist() == [448, 16, 20, 18] and _f32_bits(float(dec)) == 0x3E2AAAAB,
       f"e4m3x2 scales {s.reshape(-1).tolist()} dec {float(dec)}")
    # TransformerEngine's operation order decides a tie: amax_t = 3 -> S_enc = 896;
    # 2.25 * fp32(896 * fp32(1/6)) = 336.00003 -> 352 (the other orders give exactly 336 -> 320).
    t = torch.zeros(1, 32)
    t[0, 0], t[0, 16], t[0, 17] = 3.0, 2.25, -1.0
    _, q, s, dec = quantize_parts(t.to(BF16), nv)
    ok(s.reshape(-1).tolist() == [448, 352] and _f32_bits(float(dec)) == _f32_bits(1 / 896), f"e4m3x2 order: {s.reshape(-1).tolist()}")
    # Block 1: S_encb = 1/(352 * fp32(1/896)) ~ 2.545; 2.25 -> 5.73 -> 6; -1 -> -2.545 -> -3 (2.5 < x < 3.5).
    ok(q.reshape(2, 16)[1, :2].tolist() == [6, -3], f"e4m3x2 codes: {q.reshape(2, 16)[1, :2].tolist()}")
    # An E4M3 underflow gives exactly 0, no NaN: amax_t 448, a block of amax 2^-11.
    t = torch.zeros(1, 32)
    t[0, 0], t[0, 16] = 448, 2.0 ** -11
    out, _ = fake_quant(t.to(BF16), nv)
    ok(float(out[0, 16]) == 0 and not torch.isnan(out.to(F32)).any(), "e4m3x2 underflow -> 0")

    # e8m0: e = floor(log2 amax) - 2: amax 6 -> 2^0, amax 0.75 -> 2^-3; 0.75 / 2^-3 = 6; 0.3/0.125 = 2.4 -> 2.
    mx = SlotSpec("e2m1", 6.0, "e8m0", 32)
    t = torch.zeros(1, 64)
    t[0, 0], t[0, 32], t[0, 33] = 6.0, 0.75, 0.3
    _, q, s, _ = quantize_parts(t.to(BF16), mx)
    ok(s.reshape(-1).tolist() == [1.0, 0.125] and q.reshape(2, 32)[1, :2].tolist() == [6, 2], "e8m0 scales")

    # 16x16 weight tiles: one scale per tile, so the copy blocked along K and the copy blocked along
    # N (the transpose) are the same values.
    tile = SlotSpec("e2m1", 6.0, "e4m3x2", 16, tile_2d=True)
    w = (torch.randn(48, 64) * torch.rand(48, 1) * 3).to(BF16)
    a, _ = fake_quant(w, tile)
    b, _ = fake_quant(w.t().contiguous(), tile)
    ok(torch.equal(a, b.t()), "2D tiles: fprop copy == dgrad copy")
    _, _, s, _ = quantize_parts(w, tile)
    ok(s.numel() == 3 * 4, "2D tiles: one scale per 16x16 tile")

    # RHT (NUMERICS.md §4): M = 1/4 H16 diag(sigma) is orthogonal, M M^T = (1/16) H H^T = I, exactly.
    eye = torch.eye(16)
    m = rht16(eye)                               # row j = M e_j = column j of M
    ok(torch.equal(m @ m.t(), eye), "RHT orthogonal")
    ok(torch.equal(rht16(rht16(eye, (1.0,) * 16), (1.0,) * 16), eye), "RHT without signs is an involution")
    ramp = torch.arange(1, 17, dtype=F32)[None]
    ok(rht16(ramp, (1.0,) * 16)[0].tolist() == [34, -2, -4, 0, -8, 0, 0, 0, -16, 0, 0, 0, 0, 0, 0, 0], "RHT ramp")
    ok(float(rht16(ramp)[0, 0]) == -15.5, "RHT fixed signs: row 0 of the ramp")
    # Through the quantizer (tests/test_rht.cpp, no signs): the amax is taken after the RHT,
    # s = 34/6; 34 -> 6, -2 and -4 -> -0.5, -8 -> -1.5, -16 -> -3.
    v, q, s, _ = quantize_parts(ramp.to(BF16), dataclasses.replace(e2m1, rht=True, rht_signs=(1.0,) * 16))
    ok(float(s.reshape(-1)[0]) == float(torch.tensor(34.0) / torch.tensor(6.0)), "RHT: scale after the transform")
    ok(q.reshape(-1).tolist() == [6, -0.5, -0.5, 0, -1.5, 0, 0, 0, -3, 0, 0, 0, 0, 0, 0, 0], f"RHT codes {q.reshape(-1).tolist()}")
    v, _, _, _ = quantize_parts(ramp.to(BF16), dataclasses.replace(e2m1, rht=True))
    ok(torch.equal(v.reshape(1, 16), rht16(ramp)), "RHT with the fixed signs before amax")
    x = torch.randn(64, 256)
    ok(torch.allclose((rht16(x).reshape(-1, 16) @ m.t()).reshape(64, 256), x, atol=1e-5), "RHT inverse")

    # SR (NUMERICS.md §2): only the two neighbours, with mean equal to the input (unbiased).
    n = 20000
    for spec, val, lo, hi in ((SlotSpec("e2m1", 6.0, sr=True), 2.6, 2.0, 3.0),
                              (SlotSpec("e2m1", 6.0, sr=True), 0.8, 0.5, 1.0),
                              (SlotSpec("e2m1", 6.0, sr=True), 4.5, 4.0, 6.0),
                              (SlotSpec("e1m2", 7.0, sr=True), 3.3, 3.0, 4.0)):
        x = torch.full((n,), val, dtype=F32)
        r = round_to_grid(x, spec, torch.rand(n))
        p = (val - lo) / (hi - lo)
        sigma = (hi - lo) * math.sqrt(p * (1 - p) / n)
        ok(bool(((r == lo) | (r == hi)).all()), f"SR neighbours of {val}")
        ok(abs(float(r.mean()) - val) < 5 * sigma, f"SR mean of {val}: {float(r.mean())}")
    x = torch.tensor([6.0, 7.5, float("inf"), 0.0])
    ok(round_to_grid(x, SlotSpec("e2m1", 6.0, sr=True), torch.rand(4)).tolist() == [6, 6, 6, 0], "SR saturates")
    # Through a whole block: E[dequantized] = input (fp32 scale, s = 1/6 * amax).
    spec = SlotSpec("e1m2", 7.0, sr=True)
    t = torch.tensor([[7.0, 2.2, -0.4, 5.5] + [0.0] * 12], dtype=F32).to(BF16).expand(4000, 16).contiguous()
    out, _ = fake_quant(t, spec)
    ok(torch.allclose(out.to(F32).mean(0)[:4], t[0, :4].to(F32), atol=0.04), "SR unbiased through a block")

    # The quantized linear: close to the exact product, gradients straight-through.
    for name in ("e2m1", "ufp4", "nvfp4", "mxfp4"):
        fn = make_quantized_linear(PRESETS[name])
        x = torch.randn(64, 96, requires_grad=True)
        w = (torch.randn(32, 96) * 0.1).requires_grad_(True)
        y = fn.apply(x, w)
        y_ref = x.to(BF16).to(F32) @ w.to(BF16).to(F32).t()
        dy = torch.randn(64, 32)
        y.backward(dy.to(BF16))
        rel = lambda a, b: float((a.to(F32) - b).norm() / b.norm())
        ok(y.dtype == BF16 and rel(y, y_ref) < 0.2, f"{name} fprop error {rel(y, y_ref)}")
        dx_ref = dy.to(BF16).to(F32) @ w.to(BF16).to(F32)
        dw_ref = dy.to(BF16).to(F32).t() @ x.to(BF16).to(F32)
        ok(x.grad.shape == x.shape and rel(x.grad, dx_ref) < 0.25, f"{name} dgrad error {rel(x.grad, dx_ref)}")
        ok(w.grad.dtype == F32 and rel(w.grad, dw_ref) < 0.25, f"{name} wgrad error {rel(w.grad, dw_ref)}")
    # nvfp4 reuses the fprop weight copy for dgrad; that must equal quantizing the transpose.
    fx, fw, _, dw_, _, _ = PRESETS["nvfp4"]
    w = torch.randn(32, 96).to(BF16)
    ok(torch.equal(fake_quant(w, fw)[0], fake_quant(w.t().contiguous(), dw_)[0].t()), "nvfp4 W copies")

    # Sizes and counts against docs/model.md's table (V = 256, FLOPs at T = 256).
    table = {"d2": (320, 377472, 443008, 2658048), "d3": (512, 1328448, 1426752, 8855424),
             "d4": (704, 3213568, 3344640, 20854272), "d5": (832, 6045120, 6208960, 38728320),
             "d6": (1024, 10621824, 10818432, 67269888)}
    for name, (dff, nonemb, total, fpt) in table.items():
        cfg = ModelConfig.preset(name, 256, 256)
        ok((cfg.d_ff, cfg.n_params_nonembedding(), cfg.n_params(), cfg.flops_per_token()) == (dff, nonemb, total, fpt),
           f"{name} counts")
    model = Transformer(ModelConfig.preset("d6", 256, 256), "ufp4")
    ok(sum(p.numel() for p in model.parameters()) == 10818432, "d6 module parameter count")
    ok(ModelConfig.preset("d12", 256, 1024).d_ff == 2048, "d12 d_ff")

    # RoPE pairs (2i, 2i+1): position 1 turns pair 0 by 1 radian and the last pair by 10000^-(62/64).
    cos, sin = rope_tables(4, 64, "cpu")
    x = torch.zeros(1, 4, 1, 64)
    x[..., 0] = 1.0
    x[..., 62] = 1.0
    r = apply_rope(x.to(BF16), cos, sin).to(F32)
    ok(abs(float(r[0, 1, 0, 1]) - math.sin(1.0)) < 4e-3 and abs(float(r[0, 1, 0, 0]) - math.cos(1.0)) < 4e-3,
       "RoPE pair 0")
    ok(abs(float(r[0, 3, 0, 63]) - math.sin(3 * 10000 ** (-62 / 64))) < 1e-4, "RoPE last pair")

    check_moe(ok)

    # A tiny model, dense and MoE (4 experts, top-2), learns one fixed batch under each recipe (CPU,
    # eager, bf16 autocast; the MoE model's cross-entropy alone is compared).
    for name, experts in itertools.product(("bf16", "ufp4", "nvfp4"), (0, 4)):
        torch.manual_seed(1)
        cfg = ModelConfig(n_layers=2, d_model=64, n_heads=1, head_dim=64, d_ff=d_ff_rule(64), vocab=64, seq_len=32)
        if experts:
            cfg = dataclasses.replace(cfg, n_experts=experts, top_k=2, d_ff_expert=d_ff_expert_rule(cfg.d_ff, 2))
            name_shown = f"{name} MoE"
        else:
            name_shown = name
        model = Transformer(cfg, name)
        opt, _ = make_adamw(model, 1e-2, torch.device("cpu"))
        cos, sin = rope_tables(cfg.seq_len, cfg.head_dim, "cpu")
        data = torch.randint(0, cfg.vocab, (4, cfg.seq_len + 1))
        losses = []
        for i in range(25):
            for g in opt.param_groups:
                g["lr"] = lr_at(i, 25, 2, 1e-2, 1e-3)
            with torch.autocast(device_type="cpu", dtype=BF16):
                loss = model(data[:, :-1], data[:, 1:], cos, sin)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss if model.ce_loss is None else model.ce_loss))
        ok(math.isfinite(losses[-1]) and losses[-1] < 0.7 * losses[0],
           f"{name_shown} tiny model loss {losses[0]:.3f} -> {losses[-1]:.3f}")
        print(f"peer_torch --check: {name_shown} tiny model loss {losses[0]:.3f} -> {losses[-1]:.3f}", file=sys.stderr)

    print(f"peer_torch --check: {n_checks} passed, 0 failed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="d6", help="d<L> or an MoE preset d<L>-e<E>k<K>, or a comma-separated list")
    ap.add_argument("--recipe", default="bf16", help=f"one of {', '.join(PRESETS)}, or a comma-separated list")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--batch-tokens", type=int, default=65536)
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed optimizer steps first (compilation)")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (to try the harness)")
    ap.add_argument("--expert-path", default="auto", choices=("auto", "grouped_mm", "loop"),
                    help="MoE experts: torch._grouped_mm, a loop over the experts, or auto (the grouped "
                         "GEMM on a GPU when it passes a probe against the loop, else the loop)")
    ap.add_argument("--json", help="append each result line to this file (JSON lines)")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="seconds: skip the remaining (model, recipe) pairs once this much has passed")
    ap.add_argument("--check", action="store_true", help="CPU self-check of the quantizer and the model")
    args = ap.parse_args()
    if args.check:
        check()
        return
    if args.warmup < 1 or args.steps < 1:
        sys.exit("peer_torch: --warmup and --steps must be >= 1")
    bench(args)


if __name__ == "__main__":
    main()
