"""How fast are our models next to what users would pick instead? Ratios measured side by side in one run.

    python scripts/compare_with_torch.py [--threads N] [--min-run-time S] [--rounds R] [--record F.json]

1. MultiHeadAttention(strategy="sdpa") vs torch.nn.MultiheadAttention in eval mode (its fused fast
   path), CPU float32, at the multihead area's shape (benchmarks.cases.MULTIHEAD_SHAPE: B=8, n=256,
   d_model=512) and every head count of the default grid. Target: ratio <= 0.75 at each.
2. Transformer (paper-base) encoder+decoder stacks vs torch.nn.Transformer with the same weights,
   the part torch's module covers, forward, eval mode. Target: ratio <= 0.95.

Both sides are timed with torch.utils.benchmark in alternating rounds, so that drift of a shared
machine hits both; each ratio is the median over rounds of (ours / torch's median). For each case the
script also prints its floor: the analytic matmul FLOPs (transformer.flops) at this machine's measured
GEMM peak (benchmarks.machine.gemm_peak), as a ratio to torch's time; no implementation that does the
same matmuls can go below it, so a target under the floor cannot be met on this machine.

``--record F.json`` saves every comparison (each round's times and ratio, the target, the floor, the
machine, the commit) as a record of kind ``compare-with-torch``; the README's table is generated from
it (``python -m reports measured F.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.utils.benchmark as tb

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project's packages

from benchmarks import cases, machine  # noqa: E402
from transformer import MultiHeadAttention, Transformer, TransformerConfig, flops  # noqa: E402

MHA_TARGET, TRANSFORMER_TARGET = 0.75, 0.95


def median_time(fn, threads: int, min_run_time: float) -> float:
    return tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads).blocked_autorange(min_run_time=min_run_time).median


def paired_rounds(ours, theirs, threads: int, rounds: int, min_run_time: float) -> list[tuple[float, float]]:
    """(ours' median seconds, theirs') per round, the two timed one after the other in each round."""
    with torch.inference_mode():
        ours(), theirs()  # warm-up
        return [(median_time(ours, threads, min_run_time), median_time(theirs, threads, min_run_time))
                for _ in range(rounds)]


def mha_case(heads: int):
    s = cases.MULTIHEAD_SHAPE
    ref = torch.nn.MultiheadAttention(s["d_model"], heads, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(ref, "sdpa").eval()
    x = torch.randn(s["batch"], s["seq_len"], s["d_model"])
    with torch.inference_mode():
        torch.testing.assert_close(ours(x), ref(x, x, x, need_weights=False)[0], atol=1e-4, rtol=1e-4)
    return (lambda: ours(x)), (lambda: ref(x, x, x, need_weights=False))


def transformer_case(batch: int, n: int):
    c = TransformerConfig.preset("paper-base")
    ref = torch.nn.Transformer(c.d_model, c.num_heads, c.num_encoder_layers, c.num_decoder_layers, c.d_ff,
                               dropout=0.0, batch_first=True).eval()
    ours = Transformer.from_torch(ref, src_vocab=c.src_vocab, strategy="sdpa").eval()
    src, tgt = torch.randn(batch, n, c.d_model), torch.randn(batch, n, c.d_model)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(n)
    with torch.inference_mode():
        torch.testing.assert_close(ours.decoder(tgt, ours.encoder(src)), ref(src, tgt, tgt_mask=mask, tgt_is_causal=True),
                                   atol=1e-4, rtol=1e-4)
    return (lambda: ours.decoder(tgt, ours.encoder(src))), (lambda: ref(src, tgt, tgt_mask=mask, tgt_is_causal=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-run-time", type=float, default=1.0, help="seconds per blocked_autorange")
    p.add_argument("--batch", type=int, default=8, help="Transformer batch (the MHA cases use MULTIHEAD_SHAPE)")
    p.add_argument("--seq", type=int, default=128, help="Transformer source and target length")
    p.add_argument("--record", help="save the comparisons as a JSON record here (for the README)")
    a = p.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {a.threads} threads, float32, CPU; {a.rounds} alternating rounds")
    s = cases.MULTIHEAD_SHAPE
    c = TransformerConfig.preset("paper-base")
    comparisons = [(f"MHA sdpa / nn.MultiheadAttention (B={s['batch']}, n={s['seq_len']}, d={s['d_model']}, h={h})",
                    lambda h=h: mha_case(h), MHA_TARGET,
                    flops.multi_head_attention(s["batch"], s["seq_len"], s["d_model"], h, strategy="sdpa"))
                   for h in cases.axes("multihead", "default")["heads"]]
    stacks = flops.transformer(c, a.batch, a.seq, a.seq).forward.grouped(1)  # the stacks only: no embeddings
    comparisons.append((f"Transformer / nn.Transformer (paper-base, B={a.batch}, n={a.seq})",
                        lambda: transformer_case(a.batch, a.seq), TRANSFORMER_TARGET,
                        flops.Flops(flops.Breakdown({k: v for k, v in stacks.matmul.items()
                                                     if k in ("encoder", "decoder")}), flops.Breakdown())))
    peak = machine.gemm_peak("cpu", "float32", a.threads)
    print(f"GEMM peak at {a.threads} threads: {peak / 1e9:.1f} GFLOP/s")
    rows = []
    for name, make, target, work in comparisons:
        ours, theirs = make()
        pairs = paired_rounds(ours, theirs, a.threads, a.rounds, a.min_run_time)
        ratio = statistics.median(o / t for o, t in pairs)
        t_ours, t_theirs = statistics.median(o for o, _ in pairs), statistics.median(t for _, t in pairs)
        floor = work.forward.matmul_total / peak
        rows.append({"comparison": name, "rounds": [{"ours_s": o, "torch_s": t} for o, t in pairs], "ratio": ratio,
                     "ours_s": t_ours, "torch_s": t_theirs, "target": target, "floor_s": floor,
                     "floor_ratio": floor / t_theirs})
        print(f"{name}: ours {t_ours * 1e3:.2f} ms, torch {t_theirs * 1e3:.2f} ms, "
              f"ratio {ratio:.3f} ({'meets' if ratio <= target else 'MISSES'} target <= {target:.2f}; rounds "
              f"{min(o / t for o, t in pairs):.3f}-{max(o / t for o, t in pairs):.3f}); floor {floor * 1e3:.1f} ms = "
              f"ratio {floor / t_theirs:.2f}")
    if a.record:
        record(a.record, a, peak, rows)


def record(path: str, args, peak: float, rows: list[dict]) -> None:
    """Save the comparisons as a JSON record (kind ``compare-with-torch``) for the README."""
    from benchmarks import runner
    from reports import measured

    measured.save(path, "compare-with-torch", runner.commit(), threads=args.threads, rounds=args.rounds,
                  min_run_time=args.min_run_time, dtype="float32", gemm_peak_flops_per_s=peak, comparisons=rows)


if __name__ == "__main__":
    main()
