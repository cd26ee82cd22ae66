"""How fast are our models next to what users would pick instead? Ratios measured side by side in one run.

    python scripts/compare_with_torch.py [--device cpu|cuda] [--threads N] [--rounds R] [--block-time S]
                                         [--record F.json]

1. MultiHeadAttention(strategy="sdpa") vs torch.nn.MultiheadAttention in eval mode (its fused fast
   path), float32 on the CPU (or ``--device cuda``), at the multihead area's shape
   (benchmarks.cases.MULTIHEAD_SHAPE: B=8, n=256, d_model=512) and every head count of the default
   grid. Target: ratio <= 0.75 at each.
2. Transformer (paper-base) encoder+decoder stacks vs torch.nn.Transformer with the same weights,
   the part torch's module covers, forward, eval mode. Target: ratio <= 0.95.

Three callables per comparison: ours, torch's, and the floor, our call's matrix products replayed
alone into preallocated outputs (benchmarks.gemm_floor): no implementation that does those products
with this machine's BLAS can be faster than the floor, so a target below it cannot be met here. Each round
times them in blocks of about ``--block-time`` seconds in the order ours, torch, floor, floor, torch,
ours (torch.utils.benchmark), and each callable's time in the round is the mean of its two blocks: a
drift of a shared machine's speed over the round hits all three alike. The ratio is the median over
rounds of ours / torch in the same round, the floor likewise; the spread is their interquartile range.

``--record F.json`` saves every comparison (each round's times, the ratio, the floor, the target, the
products' FLOPs, the machine, the commit) as a record of kind ``compare-with-torch``; the README's
table is generated from it (``attention-bench measured F.json``).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

import torch
import torch.utils.benchmark as tb

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project's packages

from attention_bench import options  # noqa: E402
from benchmarks import cases  # noqa: E402
from benchmarks.core import guards
from benchmarks.core.hardware import machine
from benchmarks.core.profiling import gemm_floor
from benchmarks.core.records import commit, regime  # noqa: E402
from reports import measured  # noqa: E402
from transformer import MultiHeadAttention, Transformer, TransformerConfig, flops  # noqa: E402

MHA_TARGET, TRANSFORMER_TARGET = 0.75, 0.95
ORDER = ("ours", "torch", "floor")


def mirrored_rounds(fns: dict, threads: int, rounds: int, block_time: float) -> list[dict[str, float]]:
    """Seconds per call of each of ``fns`` in each round, timed in the order of ``fns`` and back (ABBA)."""
    timers = {name: tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads) for name, fn in fns.items()}
    calls = {name: max(1, math.ceil(block_time / t.blocked_autorange(min_run_time=block_time).median))
             for name, t in timers.items()}  # the warm-up, and how many calls make a block
    order = list(fns) + list(fns)[::-1]
    out = []
    for _ in range(rounds):
        blocks = {name: [] for name in fns}
        for name in order:
            blocks[name].append(timers[name].timeit(calls[name]).median)
        out.append({f"{name}_s": statistics.fmean(b) for name, b in blocks.items()})
    return out


def mha_case(heads: int, device: str = "cpu"):
    s = cases.MULTIHEAD_SHAPE
    ref = torch.nn.MultiheadAttention(s["d_model"], heads, batch_first=True, device=device).eval()
    ours = MultiHeadAttention.from_torch(ref, "sdpa").eval()
    x = torch.randn(s["batch"], s["seq_len"], s["d_model"], device=device)
    torch.testing.assert_close(ours(x), ref(x, x, x, need_weights=False)[0], atol=1e-4, rtol=1e-4)
    return (lambda: ours(x)), (lambda: ref(x, x, x, need_weights=False))


def transformer_case(batch: int, n: int, device: str = "cpu"):
    c = TransformerConfig.preset("paper-base")
    ref = torch.nn.Transformer(c.d_model, c.num_heads, c.num_encoder_layers, c.num_decoder_layers, c.d_ff,
                               dropout=0.0, batch_first=True, device=device).eval()
    ours = Transformer.from_torch(ref, src_vocab=c.src_vocab, strategy="sdpa").to(device).eval()
    src, tgt = (torch.randn(batch, n, c.d_model, device=device) for _ in range(2))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(n, device=device)
    torch.testing.assert_close(ours.decoder(tgt, ours.encoder(src)), ref(src, tgt, tgt_mask=mask, tgt_is_causal=True),
                               atol=1e-4, rtol=1e-4)
    return (lambda: ours.decoder(tgt, ours.encoder(src))), (lambda: ref(src, tgt, tgt_mask=mask, tgt_is_causal=True))


def comparisons(batch: int, seq: int, device: str = "cpu") -> list[tuple[str, object, float, int]]:
    """(name, make () -> (ours, torch's), target, analytic matmul FLOPs of the call) for every comparison."""
    s = cases.MULTIHEAD_SHAPE
    out = [(f"MHA sdpa / nn.MultiheadAttention (B={s['batch']}, n={s['seq_len']}, d={s['d_model']}, h={h})",
            lambda h=h: mha_case(h, device), MHA_TARGET,
            flops.multi_head_attention(s["batch"], s["seq_len"], s["d_model"], h, strategy="sdpa").forward.matmul_total)
           for h in cases.axes("multihead", "default")["heads"]]
    stacks = flops.transformer(TransformerConfig.preset("paper-base"), batch, seq, seq).forward.grouped(1).matmul
    out.append((f"Transformer / nn.Transformer (paper-base, B={batch}, n={seq})",
                lambda: transformer_case(batch, seq, device),
                TRANSFORMER_TARGET, stacks["encoder"] + stacks["decoder"]))
    return out


def compare(name, make, target, analytic: int, args) -> dict:
    """One comparison, measured and printed."""
    ours, theirs = make()  # built outside inference mode, as a user builds them
    with torch.inference_mode():
        gemms = gemm_floor.record(ours)
        rounds = mirrored_rounds({"ours": ours, "torch": theirs, "floor": gemm_floor.replay(gemms, args.device)},
                                 args.threads, args.mirrored_rounds, args.block_time)
    ratios = [r["ours_s"] / r["torch_s"] for r in rounds]
    floors = [r["floor_s"] / r["torch_s"] for r in rounds]
    row = {"comparison": name, "rounds": rounds, "target": target,
           "ratio": statistics.median(ratios), "ratio_quartiles": _quartiles(ratios),
           "floor_ratio": statistics.median(floors), "floor_quartiles": _quartiles(floors),
           "product_flops": sum(g.flops for g in gemms), "analytic_matmul_flops": analytic,
           **{f"{k}_s": statistics.median(r[f"{k}_s"] for r in rounds) for k in ORDER}}
    lo, hi = row["ratio_quartiles"]
    print(f"{name}: ours {row['ours_s'] * 1e3:.2f} ms, torch {row['torch_s'] * 1e3:.2f} ms, ratio {row['ratio']:.3f} "
          f"(IQR {lo:.3f}-{hi:.3f}; {measured.target_verdict(row).upper()}: target <= {target:.2f}); "
          f"floor {row['floor_s'] * 1e3:.2f} ms = ratio {row['floor_ratio']:.3f}, "
          f"{row['product_flops'] / row['floor_s'] / 1e9:.0f} GFLOP/s over {len(gemms)} products "
          f"({row['product_flops'] / 1e9:.2f} GFLOP; analytic {analytic / 1e9:.2f})", flush=True)
    return row


def _quartiles(values: list[float]) -> list[float]:
    """The first and third quartile (one round: its value twice)."""
    if len(values) < 2:
        return [values[0], values[0]]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return [q[0], q[2]]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/compare_with_torch.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add(p, "--device", "--threads", "--mirrored-rounds", "--seq-len", "--record")
    p.add_argument("--block-time", type=guards.seconds, default=0.2, help="seconds per timed block (at least one "
                   "call; default 0.2)")
    p.add_argument("--batch", type=guards.count, default=8, help="Transformer batch (the MHA cases use "
                   "MULTIHEAD_SHAPE; default 8)")
    return p


def main() -> None:
    p = parser()
    a = p.parse_args()
    devices = a.device or machine.local_devices()
    if len(devices) > 1:
        p.error(f"--device: give one ({', '.join(devices)} on this machine); a record holds one device's comparisons")
    try:
        guards.check_devices(devices)
    except ValueError as error:
        p.error(str(error))
    a.device, a.threads = devices[0], a.threads or torch.get_num_threads()
    torch.manual_seed(0)
    where = torch.cuda.get_device_name() if a.device == "cuda" else f"CPU, {a.threads} threads"
    print(f"torch {torch.__version__}, {where}, float32; {a.mirrored_rounds} round{'s' * (a.mirrored_rounds > 1)} of "
          "blocks of "
          f"{a.block_time:g} s in the order {', '.join(ORDER + ORDER[::-1])}")
    rows = [compare(*c, a) for c in comparisons(a.batch, a.seq_len, a.device)]
    print(measured.speed_summary(rows))
    if a.record:
        record(a.record, a, rows)


def record(path: str, args, rows: list[dict]) -> None:
    """Save the comparisons as a JSON record (kind ``compare-with-torch``) for the README."""
    measured.save(path, "compare-with-torch", commit(), regime(), device=args.device, threads=args.threads,
                  rounds=args.mirrored_rounds, block_time=args.block_time, dtype="float32", comparisons=rows)


if __name__ == "__main__":
    main()
