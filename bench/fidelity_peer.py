#!/usr/bin/env python3
"""An independent BF16 training of fp4lab's model on fp4lab's data, for the engine-fidelity check.

bench/peer_torch.py's PyTorch model (docs/model.md) trained as docs/train.md says, on a shard
directory of `fp4lab data build`, reading the training stream in exactly fp4lab's order
(docs/data.md: file order, or the shuffled windows recomputed here from the same Philox draws),
evaluating on the same validation tokens, and writing fp4lab's metrics.jsonl rows, so that its
curves can be laid beside `fp4lab train`'s (bench/fidelity.sh, bench/fidelity_report.py).

    python3 bench/fidelity_peer.py --data data/corpus --model d4 --steps 400 --seeds 0,1,2 \
        --out-dir peer-runs                       # own initial weights, one run per seed
    python3 bench/fidelity_peer.py --data data/corpus --model d4 --steps 400 \
        --init-from runs/A0/checkpoints/step_0000000001.ckpt --out-dir peer-runs
                                                  # fp4lab's weights and AdamW state after step 1

--init-from continues from an fp4lab checkpoint: its fp32 weights, AdamW moments, step and data
position, so both implementations take the same next batch from the same state. Every run of one
process reuses one compiled model (its weights are overwritten), so torch.compile runs once.
--check runs the CPU self-checks of the Philox draws and the stream (seconds).

What is the same as fp4lab: the model, its bf16/fp32 precision, AdamW with decoupled weight decay
on matrices only, the global-norm clip (scale = clip / norm when norm > clip, as fp4lab, not
torch's clip / (norm + 1e-6)), warmup then cosine to lr / 10, micro-batches of consecutive
stream sequences, eval loss as the mean over every validation target. What differs is
peer_torch.py's list (GEMM outputs rounded to bf16 by autocast, bf16 logits, torch's own
initialization unless --init-from, torch's AdamW arithmetic and attention kernel).
"""

import argparse
import json
import math
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

M32 = 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Philox4x32-10 and the shuffled order (kernels/numerics.h, engine/data/data_random.h,
# engine/data/sequence_order.h)
# ---------------------------------------------------------------------------------------------

def philox4x32_10(c0, c1, c2, c3, k0, k1):
    for r in range(10):
        if r:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
    return c0, c1, c2, c3


DATA_PURPOSE_SHUFFLE = 4


def data_philox(seed, purpose, block, sub):
    return philox4x32_10(block & M32, 0x80000000 | ((block >> 32) & 0x3FFFFFFF), purpose, sub & M32,
                         seed & M32, (seed >> 32) & M32)


def window_permutation(seed, epoch, windows):
    """pi_epoch of sequence_order.h: Fisher-Yates with 64-bit draws from words 2k, 2k+1."""
    order = list(range(windows))
    for k in range(windows - 1):
        w = data_philox(seed, DATA_PURPOSE_SHUFFLE, epoch, k >> 1)
        half = (k & 1) * 2
        r = (w[half + 1] << 32) | w[half]
        i = windows - 1 - k
        j = (r * (i + 1)) >> 64
        order[i], order[j] = order[j], order[i]
    return order


# ---------------------------------------------------------------------------------------------
# Shards (docs/data.md) and the training stream
# ---------------------------------------------------------------------------------------------

def read_shard(path):
    import numpy as np
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        if header[0] != 20240520 or header[1] != 1:
            raise SystemExit(f"{path}: not an fp4lab/llm.c token shard (magic {header[0]}, version {header[1]})")
        tokens = np.frombuffer(f.read(), dtype="<u2")
    if tokens.size != header[2]:
        raise SystemExit(f"{path}: header says {header[2]} tokens, file holds {tokens.size}")
    return tokens


class Shards:
    def __init__(self, directory):
        import numpy as np
        with open(os.path.join(directory, "manifest.json")) as f:
            self.manifest = json.load(f)
        self.train = np.concatenate([read_shard(os.path.join(directory, s["file"]))
                                     for s in self.manifest["train"]["shards"]])
        self.validation = np.concatenate([read_shard(os.path.join(directory, s["file"]))
                                          for s in self.manifest["validation"]["shards"]])
        self.vocab = int(self.manifest["vocab_size"])


class Stream:
    """fp4lab's training stream from a position (tokens consumed), file order or shuffled."""

    def __init__(self, shards, shuffle, data_seed, seq_len, position=0):
        self.train, self.shuffle, self.seed, self.T = shards.train, shuffle, data_seed, seq_len
        self.position = position
        self.windows = (self.train.size - 1) // seq_len
        self.epoch, self.order = None, None
        if shuffle == "sequences" and position % seq_len:
            raise SystemExit(f"position {position} is not a whole number of {seq_len}-token windows")

    def next_batch(self, batch):
        import numpy as np
        T = self.T
        out = np.empty((batch, T + 1), dtype=np.int64)
        if self.shuffle == "none":
            n = self.train.size
            for r in range(batch):
                idx = (self.position + r * T + np.arange(T + 1)) % n
                out[r] = self.train[idx]
            self.position += batch * T
            return out
        for r in range(batch):
            k = self.position // T
            epoch = k // self.windows
            if epoch != self.epoch:
                self.order, self.epoch = window_permutation(self.seed, epoch, self.windows), epoch
            start = self.order[k % self.windows] * T
            out[r] = self.train[start:start + T + 1]
            self.position += T
        return out


# ---------------------------------------------------------------------------------------------
# fp4lab checkpoints (engine/run/checkpoint.h)
# ---------------------------------------------------------------------------------------------

def read_checkpoint(path):
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"FP4LCKPT":
        raise SystemExit(f"{path}: not an fp4lab checkpoint")
    version, header_size, payload_size = struct.unpack_from("<IIQ", data, 8)
    payload = data[header_size:header_size + payload_size]
    import hashlib
    if hashlib.sha256(payload).hexdigest() != data[24:88].decode():
        raise SystemExit(f"{path}: checksum mismatch")
    (meta_size,) = struct.unpack_from("<Q", payload, 0)
    meta = json.loads(payload[8:8 + meta_size])
    at = 8 + meta_size
    arrays = {}
    for a in meta["arrays"]:
        arrays[a["name"]] = np.frombuffer(payload, dtype="<f4", count=a["count"], offset=at).copy()
        at += 4 * a["count"]
    return meta, arrays


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------

def lr_at(step, steps, warmup, peak, floor):
    """engine/run/schedule.cpp, cosine."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min((step - warmup) / max(1, steps - warmup), 1.0)
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_one(args, torch, peer, model, compiled_model, params, shards, cos, sin, device, name, seed,
              init=None):
    import numpy as np
    F32 = torch.float32
    T, B = args.seq_len, args.micro_batch
    accum = args.batch_tokens // (B * T)
    warmup = args.steps // 20
    floor = float(f"{args.lr / 10:.15g}")
    step, position = 0, 0
    with torch.no_grad():
        if init is None:
            torch.manual_seed(seed)
            model.init_weights()
            for g in (model.blocks[i] for i in range(len(model.blocks))):
                g.attn_norm.fill_(1.0)
                g.mlp_norm.fill_(1.0)
            model.head.final_norm.fill_(1.0)
        else:
            meta, arrays = init
            flat = torch.from_numpy(arrays["params"]).to(device)
            at = 0
            for p in params:
                p.copy_(flat[at:at + p.numel()].view_as(p))
                at += p.numel()
            if at != flat.numel():
                raise SystemExit(f"{name}: the checkpoint holds {flat.numel()} parameters, the model {at}")
            step, position = int(meta["step"]), int(meta["data_position"]["tokens"])
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    if init is not None:
        meta, arrays = init
        m = torch.from_numpy(arrays["adam_m"]).to(device)
        v = torch.from_numpy(arrays["adam_v"]).to(device)
        at = 0
        for p in params:
            n = p.numel()
            opt.state[p] = {"step": torch.tensor(float(step), dtype=F32, device=device),
                            "exp_avg": m[at:at + n].view_as(p).clone(),
                            "exp_avg_sq": v[at:at + n].view_as(p).clone()}
            at += n
    stream = Stream(shards, args.shuffle, args.data_seed if args.data_seed is not None else seed, T, position)
    val = torch.from_numpy(shards.validation[:args.eval_tokens + 1].astype(np.int64)).to(device)
    n_eval = args.eval_tokens // T
    eval_x = torch.stack([val[r * T:r * T + T] for r in range(n_eval)])
    eval_y = torch.stack([val[r * T + 1:r * T + T + 1] for r in range(n_eval)])

    out_path = os.path.join(args.out_dir, name + ".jsonl")
    rows = open(out_path + ".tmp", "w")

    def write(row):
        rows.write(json.dumps(row) + "\n")

    def evaluate(at_step):
        total, count = 0.0, 0
        with torch.no_grad():
            for first in range(0, n_eval, B):
                x, y = eval_x[first:first + B], eval_y[first:first + B]
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                    loss = compiled_model(x, y, cos, sin)
                total += float(loss) * y.numel()
                count += y.numel()
        write({"kind": "eval", "step": at_step, "tokens": at_step * args.batch_tokens, "loss": total / count})
        return total / count

    write({"kind": "run", "name": name, "seed": seed, "init_from": args.init_from_name.get(name), "shuffle": args.shuffle,
           "steps": args.steps, "lr": args.lr, "model": args.model, "implementation": "bench/fidelity_peer.py",
           "torch": torch.__version__})
    if step == 0:
        evaluate(0)
    t0 = time.time()
    while step < args.steps:
        lr = lr_at(step, args.steps, warmup, args.lr, floor)
        for g in opt.param_groups:
            g["lr"] = lr
        loss_sum = 0.0
        losses = []
        for _ in range(accum):
            batch = torch.from_numpy(stream.next_batch(B)).to(device, non_blocking=True)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = compiled_model(batch[:, :-1], batch[:, 1:], cos, sin)
            (loss / accum).backward()
            losses.append(loss.detach())
        loss_sum = float(torch.stack(losses).double().sum())
        norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)))
        if args.grad_clip > 0 and norm > args.grad_clip:
            scale = args.grad_clip / norm
            for p in params:
                p.grad.mul_(scale)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        write({"kind": "train", "step": step, "tokens": step * args.batch_tokens, "loss": loss_sum / accum,
               "lr": lr, "grad_norm": norm})
        if (args.eval_every > 0 and step % args.eval_every == 0) or step == args.steps:
            e = evaluate(step)
            print(f"{name}: step {step}/{args.steps} train {loss_sum / accum:.4f} eval {e:.4f} "
                  f"({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    rows.close()
    os.replace(out_path + ".tmp", out_path)
    return out_path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="a shard directory written by `fp4lab data build`")
    ap.add_argument("--model", default="d4")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--batch-tokens", type=int, default=131072)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-tokens", type=int, default=1048576)
    ap.add_argument("--shuffle", choices=["sequences", "none"], default="sequences")
    ap.add_argument("--data-seed", type=int, help="default: each run's seed, as fp4lab's train.data_seed")
    ap.add_argument("--seeds", default="", help="comma-separated seeds: one run each from the peer's own init")
    ap.add_argument("--init-from", default="", help="comma-separated fp4lab checkpoints: one run each from them "
                    "(the seed, for the data order, is taken from --init-seeds, in the same order)")
    ap.add_argument("--init-seeds", default="", help="the fp4lab run seed of each --init-from checkpoint")
    ap.add_argument("--out-dir", default="peer-runs")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--check", action="store_true", help="CPU self-checks (Philox vectors, permutation, stream)")
    ap.add_argument("--perturb-checkpoint", nargs=2, metavar=("IN", "OUT"),
                    help="write OUT: IN with one weight moved by one ulp of its bf16 copy, re-checksummed, "
                         "for the chaos floor (bench/fidelity.sh)")
    ap.add_argument("--perturb-index", type=int, default=-1,
                    help="which element of the flat parameter buffer (default: the middle one)")
    args = ap.parse_args()
    if args.check:
        return check()
    if args.perturb_checkpoint:
        return perturb_checkpoint(*args.perturb_checkpoint, args.perturb_index)
    if not args.data:
        ap.error("--data is required")

    import torch
    import peer_torch as peer
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    shards = Shards(args.data)
    cfg = peer.ModelConfig.preset(args.model, shards.vocab, args.seq_len)
    model = peer.Transformer(cfg, "bf16").to(device)
    params = list(model.parameters())
    if args.compile:
        model.compile_parts()
    cos, sin = peer.rope_tables(cfg.seq_len, cfg.head_dim, device)
    os.makedirs(args.out_dir, exist_ok=True)
    args.init_from_name = {}
    # The same-init runs first: their second step shows at once whether both read the same batch.
    jobs = []
    ckpts = [c for c in args.init_from.split(",") if c]
    init_seeds = [int(s) for s in args.init_seeds.split(",") if s != ""]
    if len(init_seeds) != len(ckpts):
        ap.error("--init-seeds must name one seed per --init-from checkpoint")
    for path, seed in zip(ckpts, init_seeds):
        name = f"peer-same-init-s{seed}"
        args.init_from_name[name] = path
        jobs.append((name, seed, read_checkpoint(path)))
    jobs += [(f"peer-s{s}", int(s), None) for s in args.seeds.split(",") if s != ""]
    for name, seed, init in jobs:
        out = train_one(args, torch, peer, model, model, params, shards, cos, sin, device, name, seed, init)
        print(f"fidelity_peer: wrote {out}", file=sys.stderr, flush=True)


def perturb_checkpoint(src, dst, index):
    """One weight moved by one ulp of its bf16 copy: the smallest change the training computation sees.

    The GEMMs read bf16 copies of the fp32 master weights, so one fp32 ulp almost never changes
    anything (a run from such a state was bit-identical to the unperturbed one over 12 steps on the
    CPU engine). Adding 2^16 to the fp32 bits moves the weight by one bf16 ulp exactly."""
    import hashlib
    with open(src, "rb") as f:
        data = bytearray(f.read())
    version, header_size, payload_size = struct.unpack_from("<IIQ", data, 8)
    (meta_size,) = struct.unpack_from("<Q", data, header_size)
    meta = json.loads(bytes(data[header_size + 8:header_size + 8 + meta_size]))
    count = meta["arrays"][0]["count"]
    if meta["arrays"][0]["name"] != "params":
        raise SystemExit(f"{src}: the first array is {meta['arrays'][0]['name']}, not params")
    if index < 0:
        index = count // 2
    at = header_size + 8 + meta_size + 4 * index
    (bits,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at, bits + (1 << 16))
    payload = bytes(data[header_size:header_size + payload_size])
    data[24:88] = hashlib.sha256(payload).hexdigest().encode()
    with open(dst + ".tmp", "wb") as f:
        f.write(data)
    os.replace(dst + ".tmp", dst)
    before, after = struct.unpack("<f", struct.pack("<I", bits))[0], struct.unpack("<f", struct.pack("<I", bits + (1 << 16)))[0]
    print(f"perturbed params[{index}] of {count}: {before!r} -> {after!r}", file=sys.stderr)
    return 0


def check():
    ok = True

    def expect(cond, what):
        nonlocal ok
        print(("ok   " if cond else "FAIL ") + what)
        ok = ok and cond

    # Salmon et al.'s known-answer vectors for Philox4x32-10.
    expect(philox4x32_10(0, 0, 0, 0, 0, 0) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8), "philox zero vector")
    expect(philox4x32_10(M32, M32, M32, M32, M32, M32) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
           "philox ones vector")
    p = window_permutation(7, 0, 1000)
    expect(sorted(p) == list(range(1000)) and p != list(range(1000)), "a permutation")
    expect(window_permutation(7, 1, 1000) != p, "a new order per epoch")
    expect(window_permutation(7, 0, 1) == [0], "one window")
    # The same values tests/test_data_shuffle.cpp pins for the C++ implementation.
    expect(p[:8] == [81, 271, 63, 703, 887, 382, 773, 495], "seed 7, epoch 0, 1000 windows: as fp4lab")
    expect(window_permutation(123456789012345, 3, 50)[:8] == [22, 36, 30, 5, 39, 31, 9, 40],
           "a 64-bit seed, epoch 3, 50 windows: as fp4lab")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
