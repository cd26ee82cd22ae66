"""The encoder-decoder Transformer: torch parity, causality, positions, decoding, gradients, presets."""

import math

import pytest
import torch

from transformer import (
    PRESETS,
    STRATEGIES,
    Transformer,
    TransformerConfig,
    parameter_count,
    sinusoidal_positional_encoding,
)

F64 = torch.float64


def tokens(batch, n, vocab=64):
    return torch.randint(0, vocab, (batch, n))


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's own notice for norm_first
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_from_torch_reproduces_torch_transformer(norm_first, strategy):
    """C8: both stacks and their final norms, loaded from torch.nn.Transformer, give its output to 1e-5."""
    ref = torch.nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=3, dim_feedforward=48,
                               dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    ours = Transformer.from_torch(ref, src_vocab=50, strategy=strategy).eval()
    src, tgt = torch.randn(2, 7, 32), torch.randn(2, 5, 32)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, 4:] = True
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)
    expected = ref(src, tgt, tgt_mask=causal, tgt_is_causal=True, src_key_padding_mask=pad, memory_key_padding_mask=pad)
    got = ours.decoder(tgt, ours.encoder(src, pad), memory_key_padding_mask=pad)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert ours.config.norm_first is norm_first and ours.config.num_decoder_layers == 3
    # without autograd the residual sums and ReLU write into temporaries: same output, inputs untouched
    src_copy, tgt_copy = src.clone(), tgt.clone()
    with torch.no_grad():
        fast = ours.decoder(tgt, ours.encoder(src, pad), memory_key_padding_mask=pad)
    torch.testing.assert_close(fast, got, atol=0, rtol=0)
    assert torch.equal(src, src_copy) and torch.equal(tgt, tgt_copy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_changing_a_future_token_never_changes_earlier_outputs(strategy):
    """C6: decoder output at position i depends on target tokens 0..i only."""
    m = Transformer.from_preset("tiny", strategy=strategy, dtype=F64).eval()
    src, tgt = tokens(2, 6), tokens(2, 8)
    changed = tgt.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 64
    a, b = m(src, tgt), m(src, changed)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_positional_encoding_is_the_formula_bounded_and_distinct():
    """C7: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), in [-1, 1], every row distinct."""
    n, d = 2048, 64
    pe = sinusoidal_positional_encoding(n, d, dtype=F64)
    for pos in (0, 1, 17, 2047):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    assert pe.abs().max() <= 1.0
    assert torch.cdist(pe, pe).add(torch.eye(n, dtype=F64)).min() > 1e-3
    assert sinusoidal_positional_encoding(5, 7).shape == (5, 7)  # odd widths work too


def test_positional_table_grows_past_its_initial_length():
    m = Transformer.from_preset("tiny", dtype=F64).eval()
    long = tokens(1, 1500)
    hidden = m.encode(long)
    assert hidden.shape == (1, 1500, 32) and m.positions.pe.shape[0] >= 1500
    torch.testing.assert_close(m.positions.pe[:1500].to(F64), sinusoidal_positional_encoding(1500, 32, dtype=F64))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_greedy_decoding_with_and_without_the_cache_agree(strategy, norm_first):
    m = Transformer.from_preset("tiny", strategy=strategy, norm_first=norm_first, share_embeddings=False,
                                tgt_vocab=40, dtype=F64).eval()
    src = tokens(3, 9)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[1, 6:] = True
    cached = m.generate(src, 12, bos_id=1, src_key_padding_mask=pad)
    uncached = m.generate(src, 12, bos_id=1, use_cache=False, src_key_padding_mask=pad)
    assert cached.shape == (3, 13) and (cached[:, 0] == 1).all()
    assert torch.equal(cached, uncached)
    assert len(set(cached[:, 1:].flatten().tolist())) > 1  # not a degenerate constant sequence
    # greedy means: each token is the argmax of the teacher-forced logits on the decoded prefix
    logits = m(src, cached[:, :-1], src_key_padding_mask=pad)
    assert torch.equal(logits.argmax(-1), cached[:, 1:])


def test_generation_stops_at_eos_and_pads_with_it():
    m = Transformer.from_preset("tiny", share_embeddings=False, tgt_vocab=40, dtype=F64).eval()
    src = tokens(2, 5)
    free = m.generate(src, 6, bos_id=1)
    eos = int(free[0, 2])
    out = m.generate(src, 6, bos_id=1, eos_id=eos)
    row0 = out[0].tolist()
    assert row0[2] == eos and all(t == eos for t in row0[2:])


def test_gradients_reach_every_parameter():
    m = Transformer.from_preset("tiny", dropout=0.1, share_embeddings=False, tgt_vocab=50)
    logits = m(tokens(2, 6), tokens(2, 5, 50))
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens(2, 5, 50).flatten()).backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


def test_paper_base_preset_has_the_papers_shape_and_size():
    c = TransformerConfig.preset("paper-base")
    assert (c.num_encoder_layers, c.d_model, c.d_ff, c.num_heads, c.d_head, c.dropout) == (6, 512, 2048, 8, 64, 0.1)
    assert not c.norm_first and c.share_embeddings
    n = parameter_count(Transformer(c, device="meta"))
    assert 60e6 < n < 66e6, n  # the paper reports ~65M; the vocabulary size moves it by 0.5M per 1000 tokens
    assert set(PRESETS) >= {"paper-base", "tiny"}


def test_shared_embeddings_are_one_matrix():
    m = Transformer.from_preset("tiny")
    assert m.src_embed.lut.weight is m.tgt_embed.lut.weight is m.generator.weight


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: TransformerConfig.preset("huge"), "unknown preset 'huge'"),
        (lambda: TransformerConfig(d_model=100, num_heads=8), "d_model=100 is not divisible by num_heads=8"),
        (lambda: TransformerConfig(src_vocab=10, tgt_vocab=20), "share_embeddings"),
        (lambda: TransformerConfig(strategy="fast"), "unknown strategy 'fast'"),
        (lambda: TransformerConfig(dropout=1.0), "dropout"),
        (lambda: Transformer.from_preset("tiny")(tokens(2, 0), tokens(2, 3)), "src is an empty sequence"),
        (lambda: Transformer.from_preset("tiny")(tokens(2, 4), tokens(3, 3)), "batch size"),
        (lambda: Transformer.from_preset("tiny")(tokens(2, 4, 100), tokens(2, 3)), "token id"),
        (lambda: Transformer.from_preset("tiny")(torch.randn(2, 4), tokens(2, 3)), "integer token ids"),
        (lambda: Transformer.from_preset("tiny")(tokens(4, 1)[0], tokens(2, 3)), r"shape \(batch, length\)"),
        (lambda: Transformer.from_preset("tiny").generate(tokens(2, 4), 0, bos_id=1), "max_new_tokens"),
        (lambda: Transformer.from_preset("tiny").generate(tokens(2, 4), 3, bos_id=64), "bos_id=64"),
    ],
)
def test_bad_input_is_named(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()
