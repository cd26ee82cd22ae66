"""Every module runs on every device this machine has, in float32, float16 and bfloat16."""

import pytest
import torch
from conftest import DEVICES

from transformer import STRATEGIES, MultiHeadAttention, RNNAttention, Transformer

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_transformer_trains_and_decodes(device, dtype, strategy):
    m = Transformer.from_preset("tiny", strategy=strategy, device=device, dtype=dtype)
    src, tgt = torch.randint(0, 64, (2, 7), device=device), torch.randint(0, 64, (2, 5), device=device)
    logits = m(src, tgt)
    assert logits.dtype == dtype and logits.device.type == device and torch.isfinite(logits).all()
    logits.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == dtype for p in m.parameters())
    assert m.eval().generate(src, 4, bos_id=1).shape == (2, 5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rnn_attention_trains_and_decodes(device, dtype):
    m = RNNAttention.from_preset("tiny", device=device, dtype=dtype)
    src, tgt = torch.randint(0, 64, (2, 7), device=device), torch.randint(0, 64, (2, 5), device=device)
    logits = m(src, tgt)
    assert logits.dtype == dtype and torch.isfinite(logits).all()
    logits.float().sum().backward()
    assert m.eval().generate(src, 4, bos_id=1).shape == (2, 5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_attention_is_close_to_float32(device, dtype):
    ref = MultiHeadAttention(64, 8, device=device)
    x = torch.randn(2, 33, 64, device=device)
    expected = ref(x)
    for strategy in STRATEGIES:
        m = MultiHeadAttention(64, 8, strategy=strategy, device=device, dtype=dtype)
        m.load_state_dict(ref.state_dict())
        torch.testing.assert_close(m(x.to(dtype)).float(), expected, atol=3e-2, rtol=3e-2)
