"""The analytic FLOP model equals what torch's FlopCounterMode counts, for every module and strategy."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer import (
    STRATEGIES,
    MultiHeadAttention,
    RNNAttention,
    RNNAttentionConfig,
    Transformer,
    TransformerConfig,
    flops,
)
from transformer import scaled_dot_product_attention as attn

SETTINGS = settings(max_examples=25, deadline=None)


@SETTINGS
@given(batch=st.integers(1, 3), n_q=st.integers(1, 12), n_k=st.integers(1, 12), d_k=st.integers(1, 16),
       d_v=st.integers(1, 16), backend=st.sampled_from(["math", "sdpa"]), causal=st.booleans(), grad=st.booleans())
def test_attention_matches_the_counter(batch, n_q, n_k, d_k, d_v, backend, causal, grad):
    q = torch.randn(batch, 2, n_q, d_k, requires_grad=grad)
    k = torch.randn(batch, 2, n_k, d_k, requires_grad=grad)
    v = torch.randn(batch, 2, n_k, d_v, requires_grad=grad)
    counted = flops.count(attn, q, k, v, causal=causal, backend=backend, backward=grad)
    model = flops.attention(2 * batch, n_q, n_k, d_k, d_v, backend=backend, causal=causal, inputs_require_grad=grad)
    assert counted.forward == model.forward.matmul_total
    if grad:
        assert counted.backward == model.backward.matmul_total
    else:
        assert model.backward.total == 0


@SETTINGS
@given(batch=st.integers(1, 3), n_q=st.integers(1, 10), n_k=st.one_of(st.none(), st.integers(1, 10)),
       heads=st.sampled_from([1, 2, 4, 8]), d_head=st.integers(1, 6), strategy=st.sampled_from(STRATEGIES),
       out_proj=st.booleans(), bias=st.booleans(), causal=st.booleans(), grad=st.booleans())
def test_multi_head_attention_matches_the_counter(batch, n_q, n_k, heads, d_head, strategy, out_proj, bias, causal,
                                                  grad):
    d = heads * d_head
    m = MultiHeadAttention(d, heads, strategy=strategy, out_proj=out_proj, bias=bias)
    x = torch.randn(batch, n_q, d, requires_grad=grad)
    args = (x,) if n_k is None else (x, torch.randn(batch, n_k, d, requires_grad=grad))
    counted = flops.count(m, *args, causal=causal, backward=True)
    model = flops.multi_head_attention(batch, n_q, d, heads, n_k, strategy=strategy, out_proj=out_proj, bias=bias,
                                       causal=causal, inputs_require_grad=grad)
    assert (counted.forward, counted.backward) == (model.forward.matmul_total, model.backward.matmul_total)


@settings(max_examples=12, deadline=None)
@given(batch=st.integers(1, 2), n_src=st.integers(1, 8), n_tgt=st.integers(1, 8), heads=st.sampled_from([1, 2, 4]),
       strategy=st.sampled_from(STRATEGIES), norm_first=st.booleans(), share=st.booleans(), padding=st.booleans(),
       dropout=st.sampled_from([0.0, 0.1]))
def test_transformer_matches_the_counter(batch, n_src, n_tgt, heads, strategy, norm_first, share, padding, dropout):
    """In train mode; with dropout the CPU's fused attention falls back to torch's math kernel."""
    c = TransformerConfig(src_vocab=30, tgt_vocab=30 if share else 23, d_model=16, num_heads=heads, d_ff=24,
                          num_encoder_layers=2, num_decoder_layers=1, dropout=dropout, norm_first=norm_first,
                          share_embeddings=share, strategy=strategy)
    m = Transformer(c)
    src, tgt = torch.randint(0, 30, (batch, n_src)), torch.randint(0, c.tgt_vocab, (batch, n_tgt))
    pad = torch.zeros(batch, n_src, dtype=torch.bool) if padding else None
    counted = flops.count(m, src, tgt, src_key_padding_mask=pad, backward=True)
    model = flops.transformer(c, batch, n_src, n_tgt, src_padding=padding)
    assert (counted.forward, counted.backward) == (model.forward.matmul_total, model.backward.matmul_total)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_matches_the_counter(strategy, use_cache):
    c = TransformerConfig.preset("tiny", strategy=strategy)
    m = Transformer(c).eval()
    counted = flops.count(m.generate, torch.randint(0, 64, (2, 7)), 6, bos_id=1, use_cache=use_cache)
    assert counted.forward == flops.transformer_generate(c, 2, 7, 6, use_cache=use_cache).forward.matmul_total


def test_the_cache_saves_work_that_grows_with_the_length():
    c = TransformerConfig.preset("tiny")
    cached = [flops.transformer_generate(c, 1, 8, s).forward.matmul_total for s in (8, 16, 32)]
    full = [flops.transformer_generate(c, 1, 8, s, use_cache=False).forward.matmul_total for s in (8, 16, 32)]
    assert all(f > k for f, k in zip(full, cached, strict=True))
    assert full[2] / cached[2] > full[0] / cached[0]


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 3), n_src=st.integers(1, 7), n_tgt=st.integers(1, 6), hidden=st.integers(2, 9))
def test_rnn_attention_matches_the_counter(batch, n_src, n_tgt, hidden):
    c = RNNAttentionConfig(src_vocab=20, tgt_vocab=17, emb_dim=5, enc_hidden=hidden, dec_hidden=hidden + 1,
                           align_dim=3, maxout_units=4)
    m = RNNAttention(c)
    src, tgt = torch.randint(0, 20, (batch, n_src)), torch.randint(0, 17, (batch, n_tgt))
    counted = flops.count(m, src, tgt, backward=True)
    model = flops.rnn_attention(c, batch, n_src, n_tgt)
    assert (counted.forward, counted.backward) == (model.forward.matmul_total, model.backward.matmul_total)
    gen = flops.count(m.eval().generate, src, 4, bos_id=0)
    assert gen.forward == flops.rnn_attention_generate(c, batch, n_src, 4).forward.matmul_total


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_matmul_flops_do_not_depend_on_the_number_of_heads(strategy):
    """C4 at fixed d_model: h = 1..64 heads, the same matmul FLOPs; the softmax work grows with h."""
    models = {h: flops.multi_head_attention(4, 128, 512, h, strategy=strategy) for h in (1, 2, 4, 8, 16, 32, 64)}
    assert len({f.forward.matmul_total for f in models.values()}) == 1
    assert len({f.backward.matmul_total for f in models.values()}) == 1
    softmax = [f.forward.other["softmax"] for f in models.values()]
    assert softmax == sorted(softmax) and softmax[-1] == 64 * softmax[0]
    x = torch.randn(2, 16, 64)
    counted = {flops.count(MultiHeadAttention(64, h, strategy=strategy), x).forward for h in (1, 8, 64)}
    assert len(counted) == 1


def test_breakdown_components_and_the_classic_formulas():
    b, n, d, h = 2, 100, 64, 4
    f = flops.multi_head_attention(b, n, d, h).forward
    for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
        assert f.matmul[proj] == 2 * b * n * d * d
    assert f.matmul["scores"] + f.matmul["weights_v"] == 4 * b * n * n * d  # FlashAttention's 4*B*h*n^2*d_head
    assert set(f.other) >= {"softmax", "scale", "q_proj"} and "mask" not in f.other
    assert "mask" in flops.multi_head_attention(b, n, d, h, causal=True).forward.other
    without = flops.multi_head_attention(b, n, d, 1, out_proj=False).forward
    assert without.matmul_total == f.matmul_total - 2 * b * n * d * d
    assert flops.causal_pairs(4, 4) == 10 and flops.causal_pairs(2, 5) == 3
    assert flops.useful_attention_flops(1, 4, 4, 8, causal=True) == 4 * 10 * 8
    rows = flops.multi_head_attention(b, n, d, h).rows()
    assert sum(r["flops"] for r in rows if r["pass"] == "forward") == f.total


def test_transformer_breakdown_groups_by_stack():
    c = TransformerConfig.preset("paper-base")
    f = flops.transformer(c, 1, 10, 10).forward.grouped(1)
    assert set(f.matmul) == {"encoder", "decoder", "generator"}
    assert f.matmul["generator"] == 2 * 10 * 512 * 37000


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by num_heads=4"):
        flops.multi_head_attention(1, 4, 10, 4)
    with pytest.raises(ValueError, match="unknown strategy"):
        flops.multi_head_attention(1, 4, 8, 4, strategy="x")
    with pytest.raises(ValueError, match="n_q must be a positive integer"):
        flops.attention(1, 0, 4, 8)
    with pytest.raises(ValueError, match="backward pass was not counted"):
        _ = flops.count(torch.mm, torch.randn(2, 2), torch.randn(2, 2)).train


@pytest.mark.parametrize("call", [
    lambda: flops.useful_attention_flops(1, 4, 4, 8, causal="no"),
    lambda: flops.attention(1, 4, 4, 8, causal="no"),
    lambda: flops.attention(1, 4, 4, 8, masked=1),
    lambda: flops.multi_head_attention(1, 4, 8, 2, out_proj="False"),
    lambda: flops.multi_head_attention(1, 4, 8, 2, causal="yes"),
])
def test_flags_are_booleans_as_the_modules_take_them(call):
    with pytest.raises(TypeError, match="must be True or False"):
        call()
    assert flops.useful_attention_flops(1, 4, 4, 1, causal=False) == 64  # the count "no" had silently made causal


@pytest.mark.parametrize("offset", [-5, -1, 1.5, True])
def test_positions_start_at_a_whole_offset_of_zero_or_more(offset):
    from transformer.layers import PositionalEncoding

    with pytest.raises(ValueError, match=f"offset must be a whole number >= 0.*{offset!r}"):
        PositionalEncoding(8)(torch.zeros(1, 3, 8), offset=offset)
    assert torch.equal(PositionalEncoding(8)(torch.zeros(1, 3, 8), offset=2),
                       PositionalEncoding(8)(torch.zeros(1, 5, 8))[:, 2:])
