"""The floor of scripts/compare_with_torch.py: the products a call executes, recorded once each (inside
torch's fast paths too, never twice through a composite), a causal kernel's products over the keys it
keeps, and a replay that runs exactly those products."""

import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.core.profiling.gemm_floor import Gemm, record, replay
from transformer import MultiHeadAttention, Transformer, TransformerConfig, flops


@pytest.mark.parametrize("heads", [1, 4])
def test_our_and_torchs_attention_execute_the_analytic_models_products(heads):
    B, n, d = 2, 16, 64
    ref = torch.nn.MultiheadAttention(d, heads, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(ref, "sdpa").eval()
    x = torch.randn(B, n, d)
    analytic = flops.multi_head_attention(B, n, d, heads, strategy="sdpa").forward.matmul_total
    with torch.inference_mode():
        mine = record(lambda: ours(x))
        # torch's fast path: one opaque operator to a dispatch mode
        theirs = record(lambda: ref(x, x, x, need_weights=False))
    dh = d // heads
    assert mine == [Gemm(0, B * n, d, 3 * d), Gemm(B * heads, n, dh, n), Gemm(B * heads, n, n, dh),
                    Gemm(0, B * n, d, d)]
    assert sum(g.flops for g in mine) == sum(g.flops for g in theirs) == analytic


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_fused_kernel_of_each_device_is_recorded_and_replayed_there(device, dtype):
    """On a GPU the fused attention is the flash, memory-efficient or cuDNN kernel: each counts as its two products."""
    mha = MultiHeadAttention(64, 4, strategy="sdpa", device=device, dtype=dtype).eval()
    x = torch.randn(2, 16, 64, device=device, dtype=dtype)
    with torch.inference_mode():
        gemms = record(lambda: mha(x))
        assert gemms[1:3] == [Gemm(8, 16, 16, 16), Gemm(8, 16, 16, 16)]
        analytic = flops.multi_head_attention(2, 16, 64, 4, strategy="sdpa").forward.matmul_total
        assert sum(g.flops for g in gemms) == analytic
        with FlopCounterMode(display=False) as counter:
            replay(gemms, device, dtype)()
    assert counter.get_total_flops() == sum(g.flops for g in gemms)


def test_a_composite_is_recorded_once():
    a, w, b = torch.randn(3, 5, 7), torch.randn(11, 7), torch.randn(11)
    assert record(lambda: F.linear(a, w, b)) == [Gemm(0, 15, 7, 11)]  # linear -> addmm, not linear and addmm
    assert record(lambda: torch.matmul(a, torch.randn(3, 7, 2))) == [Gemm(3, 5, 7, 2)]  # matmul -> bmm


@pytest.mark.parametrize("n_q, n_k, kept", [(8, 8, 5), (4, 8, 3), (8, 3, 3)])
def test_a_causal_kernel_counts_the_keys_it_keeps(n_q, n_k, kept):
    """Top-left causal: query i sees keys 0..min(i, n_k - 1); on average over queries, rounded up. What
    runs is recorded: with d_v != d_k torch falls back to its math path, which computes every score."""
    q, k, v = torch.randn(2, 3, n_q, 16), torch.randn(2, 3, n_k, 16), torch.randn(2, 3, n_k, 16)
    assert kept == -(-sum(min(i + 1, n_k) for i in range(n_q)) // n_q)
    assert record(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)) == [
        Gemm(6, n_q, 16, kept), Gemm(6, n_q, kept, 16)]
    assert record(lambda: F.scaled_dot_product_attention(q, k, v)) == [Gemm(6, n_q, 16, n_k), Gemm(6, n_q, n_k, 16)]
    v8 = torch.randn(2, 3, n_k, 8)
    assert record(lambda: F.scaled_dot_product_attention(q, k, v8, is_causal=True)) == [
        Gemm(6, n_q, 16, n_k), Gemm(6, n_q, n_k, 8)]


def test_our_transformer_stacks_and_torchs_execute_the_same_products():
    c = TransformerConfig(d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=64,
                          src_vocab=11, tgt_vocab=11, dropout=0.0)
    ref = torch.nn.Transformer(c.d_model, c.num_heads, 2, 2, c.d_ff, dropout=0.0, batch_first=True).eval()
    ours = Transformer.from_torch(ref, src_vocab=11).eval()
    src, tgt = torch.randn(2, 6, 32), torch.randn(2, 5, 32)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5)
    with torch.inference_mode():
        mine = record(lambda: ours.decoder(tgt, ours.encoder(src)))
        theirs = record(lambda: ref(src, tgt, tgt_mask=mask, tgt_is_causal=True))
    stacks = flops.transformer(c, 2, 6, 5).forward.grouped(1).matmul
    causal_pairs_skipped = 2 * 4 * (5 * 5 - 5 * -(-15 // 5))  # per decoder layer: batch * heads * (all - kept) pairs
    assert sum(g.flops for g in mine) == sum(g.flops for g in theirs)
    assert sum(g.flops for g in mine) == stacks["encoder"] + stacks["decoder"] - 2 * 2 * 2 * causal_pairs_skipped * 8


def test_the_replay_runs_exactly_the_recorded_products():
    gemms = [Gemm(0, 9, 4, 7), Gemm(3, 5, 6, 2), Gemm(0, 9, 4, 7)]
    run = replay(gemms)
    with FlopCounterMode(display=False) as counter:
        run()
    assert counter.get_total_flops() == sum(g.flops for g in gemms) == 2 * (2 * 9 * 4 * 7) + 2 * 3 * 5 * 6 * 2


def _script():
    path = os.path.join(os.path.dirname(__file__), "..", "scripts", "compare_with_torch.py")
    spec = importlib.util.spec_from_file_location("compare_with_torch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_comparison_times_its_callables_in_mirrored_order():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("ours", "torch", "floor")}
    rounds = _script().mirrored_rounds(fns, threads=1, rounds=2, block_time=1e-4)
    assert [set(r) for r in rounds] == [{"ours_s", "torch_s", "floor_s"}] * 2
    runs = [name for i, name in enumerate(calls) if i == 0 or calls[i - 1] != name]  # adjacent blocks of one merge
    assert runs[-9:] == ["ours", "torch", "floor", "torch", "ours", "torch", "floor", "torch", "ours"]
    assert _script()._quartiles([0.9]) == [0.9, 0.9]  # one round (--mirrored-rounds 1) has a spread of nothing
    assert _script()._quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == [2.0, 4.0]


@pytest.mark.parametrize("flags, message", [
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu' (choose from 'cpu', 'cuda')"),
    (["--mirrored-rounds", "0"], "argument --mirrored-rounds: must be a whole number >= 1, got '0'"),
    (["--block-time", "nan"], "argument --block-time: must be a finite number of seconds > 0, got 'nan'"),
    (["--device", "cpu", "--device", "cuda"], "--device: give one"),
] + ([] if torch.cuda.is_available() else [(["--device", "cuda"], "--device cuda: this machine has no CUDA device")]))
def test_the_comparison_refuses_bad_input_before_measuring(flags, message, monkeypatch, capsys):
    # in this process: the script's start from a command line is test_cli's (every script's --help from any folder)
    script = _script()
    monkeypatch.setattr(script, "compare", lambda *a, **k: pytest.fail("measured despite bad input"))
    monkeypatch.setattr("sys.argv", ["compare_with_torch.py", *flags])
    with pytest.raises(SystemExit) as exited:
        script.main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err, err


def _comparison(name, ours, torch_s, floor, target):
    rounds = [{"ours_s": ours * f, "torch_s": torch_s * f, "floor_s": floor * f} for f in (1.0, 1.1, 0.9)]
    return {"comparison": name, "rounds": rounds, "target": target, "ratio": ours / torch_s,
            "floor_ratio": floor / torch_s}


def test_a_target_below_the_floor_is_out_of_reach_and_a_miss_says_how_close_ours_must_come():
    from reports import measured

    met = _comparison("met", 7.0, 10.0, 6.0, 0.75)
    unreachable = _comparison("unreachable", 9.5, 10.0, 8.0, 0.75)
    missed = _comparison("missed", 10.0, 10.0, 9.0, 0.95)
    assert [measured.target_verdict(c) for c in (met, unreachable, missed)] == ["meets", "out of reach", "misses"]
    assert measured.above_floor(missed) == pytest.approx(10 / 9)
    summary = measured.speed_summary([met, unreachable, missed])
    assert summary.startswith("1 of 3 comparisons meet their target. 1 is out of reach on this machine")
    assert "unreachable: floor 0.800 > 0.75" in summary
    assert "missed: ours / floor must be ≤ 1.056, is 1.111" in summary  # 0.95 / 0.9 against 10 / 9
    assert "out of reach" not in measured.speed_summary([met, missed])
