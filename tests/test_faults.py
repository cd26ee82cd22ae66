"""Faults injected into the suite's entry points: each gets a clear outcome, never a silently wrong one.

Every test here throws one bad input or one broken folder at the real code (a subprocess, a folder on
disk, the Python API) and asserts what a user sees: an error that names the value and what is allowed,
a non-zero exit code, and no result file that was there before changed or lost.
"""

from __future__ import annotations

import math

import pytest
import torch

from transformer import (MultiHeadAttention, RNNAttentionConfig, TransformerConfig, flops,
                         scaled_dot_product_attention)
from transformer.layers import EncoderLayer, PositionalEncoding

# -- model parameters (item 5) and errors that name what the user typed (item 10) --------------------


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
])
def test_flop_functions_refuse_non_positive_sizes_naming_the_argument(call, named, shown):
    with pytest.raises(ValueError) as error:
        call()
    assert named in str(error.value) and shown in str(error.value)


def test_valid_edge_values_still_work():
    assert math.isclose(scaled_dot_product_attention(*(torch.ones(1, 2, 4),) * 3, scale=1.0).sum().item(), 8.0)
    TransformerConfig(dropout=0.0, layer_norm_eps=1e-12, norm_first=True)
    assert flops.attention(1, 1, 1, 1).forward.matmul_total == 4
