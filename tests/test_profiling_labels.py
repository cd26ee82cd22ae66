"""Profiles read in the paper's terms: every component is labelled with record_function."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from transformer import RNNAttention, Transformer


def labels(fn) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages()}


@pytest.mark.parametrize("strategy, expected", [
    ("batched", {"mha.qkv_proj", "attention.scores", "attention.mask", "attention.softmax", "attention.weights_v"}),
    ("looped", {"mha.head_proj", "attention.scores", "attention.softmax", "mha.concat"}),
    ("sdpa", {"mha.qkv_proj", "attention.sdpa"}),
])
def test_transformer_components_are_labelled(strategy, expected):
    m = Transformer.from_preset("tiny", strategy=strategy)
    src, tgt = torch.randint(0, 64, (2, 5)), torch.randint(0, 64, (2, 4))
    found = labels(lambda: m(src, tgt))
    common = {"embedding", "positional_encoding", "encoder", "decoder", "encoder.self_attn", "decoder.self_attn",
              "decoder.cross_attn", "mha.q_proj", "mha.out_proj", "ffn", "add_norm", "generator"}
    if strategy == "looped":
        common -= {"mha.q_proj"}
    assert common | expected <= found, sorted((common | expected) - found)
    assert "decode_step" in labels(lambda: m.eval().generate(src, 2, bos_id=1))


def test_rnn_components_are_labelled():
    m = RNNAttention.from_preset("tiny")
    src, tgt = torch.randint(0, 64, (2, 5)), torch.randint(0, 64, (2, 4))
    found = labels(lambda: m(src, tgt))
    assert {"encoder.bigru", "additive_attention.keys", "additive_attention", "gru_step", "readout",
            "generator"} <= found
