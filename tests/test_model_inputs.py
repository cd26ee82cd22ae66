"""The models' and the FLOP model's inputs: a bad value is an error naming it and what is allowed; fully
masked rows and padded batches give the same answer as each sequence alone, never NaN."""

from __future__ import annotations

import math

import pytest
import torch

from transformer import (
    MultiHeadAttention,
    RNNAttention,
    RNNAttentionConfig,
    Transformer,
    TransformerConfig,
    flops,
    scaled_dot_product_attention,
)
from transformer.layers import EncoderLayer, PositionalEncoding

# -- model parameters and errors that name what the user typed --------------------


@pytest.mark.parametrize("make, named, shown", [
    (lambda: TransformerConfig(layer_norm_eps=-1), "layer_norm_eps", "-1"),
    (lambda: TransformerConfig(layer_norm_eps=float("nan")), "layer_norm_eps", "nan"),
    (lambda: TransformerConfig(norm_first="no"), "norm_first", "'no'"),
    (lambda: TransformerConfig(share_embeddings=1), "share_embeddings", "1"),
    (lambda: TransformerConfig(dropout=1.0), "dropout", "1.0"),
    (lambda: TransformerConfig(dropout=-0.1), "dropout", "-0.1"),
    (lambda: TransformerConfig(dropout=float("nan")), "dropout", "nan"),
    (lambda: EncoderLayer(32, 4, 64, layer_norm_eps=0.0), "layer_norm_eps", "0.0"),
    (lambda: EncoderLayer(32, 4, 64, norm_first="yes"), "norm_first", "'yes'"),
    (lambda: EncoderLayer(32, 4, -64), "d_ff", "-64"),
    (lambda: MultiHeadAttention(32, 4, dropout=2), "dropout", "2"),
    (lambda: MultiHeadAttention(32, 4, out_proj="False"), "out_proj", "'False'"),
    (lambda: MultiHeadAttention(32, 4)(torch.randn(1, 3, 32), causal="no"), "causal", "'no'"),
    (lambda: PositionalEncoding(32, dropout=1.5), "dropout", "1.5"),
    (lambda: RNNAttentionConfig(enc_hidden=0), "enc_hidden", "0"),
])
def test_invalid_model_parameters_name_the_argument_and_value(make, named, shown):
    with pytest.raises((ValueError, TypeError)) as error:
        make()
    assert named in str(error.value) and shown in str(error.value)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -1.0])
def test_attention_scale_must_be_finite_and_positive(scale):
    q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match=f"scale must be a finite number > 0, got {scale!r}"):
        scaled_dot_product_attention(q, q, q, scale=scale)


@pytest.mark.parametrize("call, named, shown", [
    (lambda: flops.transformer(TransformerConfig.preset("tiny"), -8, 16, 16), "batch", "-8"),
    (lambda: flops.transformer(TransformerConfig.preset("tiny"), 8, 0, 16), "n_src", "0"),
    (lambda: flops.transformer_generate(TransformerConfig.preset("tiny"), 8, -1, 4), "n_src", "-1"),
    (lambda: flops.multi_head_attention(-2, 16, 32, 4), "batch", "-2"),  # not "batch*h = -8"
    (lambda: flops.multi_head_attention(2, 16, 32, 4, n_k=-3), "n_k", "-3"),
    (lambda: flops.multi_head_attention(2, 16, 30, 4), "d_model=30", "num_heads=4"),  # not "d_head=7.5"
    (lambda: flops.attention(2, -16, 16, 8), "n_q", "-16"),
    (lambda: flops.rnn_attention(RNNAttentionConfig.preset("tiny"), 2, 16, -1), "n_tgt", "-1"),
    (lambda: flops.rnn_attention_generate(RNNAttentionConfig.preset("tiny"), 0, 16, 4), "batch", "0"),
    (lambda: flops.useful_attention_flops(2, 16, 16, -64), "d_head", "-64"),
    # a dropout probability out of [0, 1) is refused as TransformerConfig refuses it, whatever the strategy
    (lambda: flops.multi_head_attention(2, 5, 16, 4, dropout_p=1.5), "dropout_p", "1.5"),
    (lambda: flops.attention(2, 5, 5, 4, dropout_p=-0.1), "dropout_p", "-0.1"),
    (lambda: flops.sdpa_recomputes(8, dropout_p=1.0), "dropout_p", "1.0"),
])
def test_flop_functions_refuse_non_positive_sizes_naming_the_argument(call, named, shown):
    with pytest.raises(ValueError) as error:
        call()
    assert named in str(error.value) and shown in str(error.value)


def test_valid_edge_values_still_work():
    assert math.isclose(scaled_dot_product_attention(*(torch.ones(1, 2, 4),) * 3, scale=1.0).sum().item(), 8.0)
    TransformerConfig(dropout=0.0, layer_norm_eps=1e-12, norm_first=True)
    assert flops.attention(1, 1, 1, 1).forward.matmul_total == 4


# -- fully masked rows ----------------------------------------------------------------------

def _masked_inputs(strategy=None):
    q = torch.randn(2, 4, 3, 8)
    keep = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    keep[0, :, 1] = False  # query 1 of batch 0 may attend to no key
    return q, torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8), keep


@pytest.mark.parametrize("backend", ["math", "sdpa"])
@pytest.mark.parametrize("additive", [False, True])
def test_a_query_with_every_key_masked_attends_to_nothing(backend, additive):
    q, k, v, keep = _masked_inputs()
    mask = keep if not additive else torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    out = scaled_dot_product_attention(q, k, v, mask, backend=backend)
    assert not out.isnan().any()
    assert (out[0, :, 1] == 0).all()  # the fully masked row: zero output
    unmasked = scaled_dot_product_attention(q[1:], k[1:], v[1:], backend=backend)
    torch.testing.assert_close(out[1:], unmasked)  # other rows untouched
    if backend == "math":
        _, weights = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
        assert (weights[0, :, 1] == 0).all() and torch.allclose(weights[1].sum(-1), torch.ones(4, 3))


@pytest.mark.parametrize("strategy", ["batched", "looped", "sdpa"])
def test_all_padding_keys_give_zero_heads_with_every_strategy(strategy):
    mha = MultiHeadAttention(16, 4, strategy=strategy, bias=False).eval()
    x = torch.randn(2, 3, 16)
    padding = torch.tensor([[True, True, True], [False, False, True]])
    out = mha(x, key_padding_mask=padding)
    assert not out.isnan().any() and (out[0] == 0).all()  # no bias: W_O maps the zero heads to 0


def _padded_batch(lengths, vocab, n):
    tokens = torch.randint(1, vocab, (len(lengths), n))
    padding = torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]
    return tokens.masked_fill(padding, 0), padding


@pytest.mark.parametrize("strategy", ["batched", "looped", "sdpa"])
def test_transformer_on_a_padded_batch_equals_each_sequence_alone(strategy):
    from transformer import Transformer

    model = Transformer.from_preset("tiny", strategy=strategy).eval()
    src, src_pad = _padded_batch([7, 3, 5], 64, 7)
    tgt, tgt_pad = _padded_batch([6, 2, 4], 64, 6)
    with torch.no_grad():
        batch = model(src, tgt, src_pad, tgt_pad)
        generated = model.generate(src, 5, bos_id=1, src_key_padding_mask=src_pad)
        for i, (ns, nt) in enumerate([(7, 6), (3, 2), (5, 4)]):
            alone = model(src[i:i + 1, :ns], tgt[i:i + 1, :nt])
            torch.testing.assert_close(batch[i:i + 1, :nt], alone, atol=1e-5, rtol=1e-5)
            assert torch.equal(generated[i], model.generate(src[i:i + 1, :ns], 5, bos_id=1)[0])


def test_transformer_with_left_padded_targets_or_an_empty_source_gives_no_nan():
    from transformer import Transformer

    model = Transformer.from_preset("tiny", strategy="batched").eval()
    src, tgt = torch.randint(1, 64, (2, 5)), torch.randint(1, 64, (2, 4))
    left = torch.tensor([[True, True, False, False], [False] * 4])  # rows 0-1 of target 0 see no key
    empty = torch.tensor([[True] * 5, [False] * 5])  # source 0 is all padding
    with torch.no_grad():
        assert not model(src, tgt, tgt_key_padding_mask=left).isnan().any()
        assert not model(src, tgt, src_key_padding_mask=empty).isnan().any()


def test_rnn_on_a_padded_batch_equals_each_sequence_alone_and_refuses_an_empty_source():
    from transformer import RNNAttention

    model = RNNAttention.from_preset("tiny").eval()
    src, src_pad = _padded_batch([6, 2], 64, 6)
    tgt = torch.randint(1, 64, (2, 4))
    with torch.no_grad():
        batch = model(src, tgt, src_pad)
        for i, n in enumerate([6, 2]):
            torch.testing.assert_close(batch[i:i + 1], model(src[i:i + 1, :n], tgt[i:i + 1]), atol=1e-5, rtol=1e-5)
        with pytest.raises(ValueError, match="every position of row 1 as padding"):
            model(src, tgt, torch.tensor([[False] * 6, [True] * 6]))


@pytest.mark.parametrize("strategy", ["batched", "looped", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64])
def test_inputs_of_another_dtype_than_the_weights_are_named(strategy, dtype):
    mha = MultiHeadAttention(16, 4, strategy=strategy)
    with pytest.raises(TypeError, match=f"query .*{dtype}.*torch.float32|query .*torch.float32.*{dtype}"):
        mha(torch.ones(2, 3, 16, dtype=dtype))


@pytest.mark.parametrize("model", [Transformer, RNNAttention])
def test_generating_from_an_empty_batch_is_a_clear_error(model):
    with pytest.raises(ValueError, match=r"src holds no sequence \(shape \(0, 5\)\); need a batch of at least one"):
        model.from_preset("tiny").eval().generate(torch.zeros(0, 5, dtype=torch.long), max_new_tokens=3, bos_id=1)


def test_causal_cross_attention_is_one_definition_equal_across_strategies():
    """Queries and keys of different lengths with causal=True: the top-left-aligned mask (query i sees keys 0..i,
    torch's convention), the same from every strategy and equal to equation (1) with that mask written out."""
    mha = MultiHeadAttention(16, 4, strategy="batched").double()
    q, kv = torch.randn(2, 3, 16, dtype=torch.float64), torch.randn(2, 7, 16, dtype=torch.float64)
    outputs = {}
    for strategy in ("batched", "looped", "sdpa"):
        mha.strategy = strategy
        outputs[strategy] = mha(q, kv, kv, causal=True).detach()
    mha.strategy = "batched"
    explicit = mha(q, kv, kv, attn_mask=torch.ones(3, 7, dtype=torch.bool).tril()).detach()
    for out in outputs.values():
        torch.testing.assert_close(out, explicit)
