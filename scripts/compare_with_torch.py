"""How fast are our models next to what users would pick instead? Ratios measured side by side in one run.

    python scripts/compare_with_torch.py [--threads N] [--min-run-time S]

1. MultiHeadAttention(strategy="sdpa") vs torch.nn.MultiheadAttention in eval mode (its fused fast
   path), CPU float32, B=8, n=512, d_model=512, h=8. Target: ratio <= 1.00.
2. Transformer (paper-base) encoder+decoder stacks vs torch.nn.Transformer with the same weights,
   the part torch's module covers, forward, eval mode. Target: ratio <= 1.10.

Both sides are timed with torch.utils.benchmark in alternating rounds, so that drift of a shared
machine hits both; each ratio is the median over rounds of (ours / torch's median).
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.utils.benchmark as tb

from transformer import MultiHeadAttention, Transformer, TransformerConfig


def median_time(fn, threads: int, min_run_time: float) -> float:
    return tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads).blocked_autorange(min_run_time=min_run_time).median


def paired_ratio(ours, theirs, threads: int, rounds: int, min_run_time: float) -> tuple[float, float, float]:
    """(median ratio ours/theirs over rounds, ours' median seconds, theirs' median seconds)."""
    with torch.inference_mode():
        ours(), theirs()  # warm-up
        pairs = [(median_time(ours, threads, min_run_time), median_time(theirs, threads, min_run_time)) for _ in range(rounds)]
    return statistics.median(a / b for a, b in pairs), statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs)


def mha_case():
    ref = torch.nn.MultiheadAttention(512, 8, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(ref, "sdpa").eval()
    x = torch.randn(8, 512, 512)
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
    p.add_argument("--batch", type=int, default=8, help="Transformer batch (MHA case is fixed at B=8)")
    p.add_argument("--seq", type=int, default=128, help="Transformer source and target length")
    a = p.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {a.threads} threads, float32, CPU; {a.rounds} alternating rounds")
    for name, (ours, theirs), target in (
        ("MHA sdpa / nn.MultiheadAttention (B=8, n=512, d=512, h=8)", mha_case(), 1.00),
        (f"Transformer / nn.Transformer (paper-base, B={a.batch}, n={a.seq})", transformer_case(a.batch, a.seq), 1.10),
    ):
        ratio, t_ours, t_theirs = paired_ratio(ours, theirs, a.threads, a.rounds, a.min_run_time)
        verdict = "meets" if ratio <= target else "MISSES"
        print(f"{name}: ours {t_ours * 1e3:.2f} ms, torch {t_theirs * 1e3:.2f} ms, "
              f"ratio {ratio:.3f} ({verdict} target <= {target:.2f})")


if __name__ == "__main__":
    main()
