"""Multi-head attention: three strategies, one function, equal to torch.nn.MultiheadAttention."""

import pytest
import torch

from transformer import STRATEGIES, MultiHeadAttention

D, H = 32, 4


def torch_mha(batch_first=True):
    return torch.nn.MultiheadAttention(D, H, batch_first=batch_first, dtype=torch.float64)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_self_attention_matches_torch(strategy):
    ref = torch_mha()
    x = torch.randn(3, 9, D, dtype=torch.float64)
    ours = MultiHeadAttention.from_torch(ref, strategy)
    torch.testing.assert_close(ours(x), ref(x, x, x, need_weights=False)[0])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cross_attention_with_masks_matches_torch(strategy):
    """n_q != n_k, a key padding mask and a causal-style attention mask, in torch's conventions."""
    ref = torch_mha()
    x, mem = torch.randn(2, 6, D, dtype=torch.float64), torch.randn(2, 8, D, dtype=torch.float64)
    pad = torch.zeros(2, 8, dtype=torch.bool)
    pad[1, 5:] = True
    blocked = torch.ones(6, 8, dtype=torch.bool).triu(3)  # torch: True = may NOT attend
    expected = ref(x, mem, mem, key_padding_mask=pad, attn_mask=blocked, need_weights=False)[0]
    ours = MultiHeadAttention.from_torch(ref, strategy)
    torch.testing.assert_close(ours(x, mem, attn_mask=~blocked, key_padding_mask=pad), expected)


@pytest.mark.parametrize("strategy", ["batched", "looped"])
def test_per_head_weights_match_torch(strategy):
    ref = torch_mha()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    _, expected = ref(x, x, x, need_weights=True, average_attn_weights=False)
    _, weights = MultiHeadAttention.from_torch(ref, strategy)(x, need_weights=True)
    torch.testing.assert_close(weights, expected)


def test_strategies_agree_on_the_same_weights_and_gradients():
    x = torch.randn(2, 7, D, dtype=torch.float64)
    base = MultiHeadAttention(D, H, dtype=torch.float64)
    outs, grads = [], []
    for strategy in STRATEGIES:
        m = MultiHeadAttention(D, H, strategy=strategy, dtype=torch.float64)
        m.load_state_dict(base.state_dict())
        out = m(x, causal=True)
        out.square().sum().backward()
        outs.append(out)
        grads.append(m.in_proj_weight.grad)
    for out, grad in zip(outs[1:], grads[1:], strict=True):
        torch.testing.assert_close(out, outs[0])
        torch.testing.assert_close(grad, grads[0])


def test_head_masks_with_a_head_dimension():
    m = MultiHeadAttention(D, H, dtype=torch.float64)
    x = torch.randn(2, 5, D, dtype=torch.float64)
    keep = torch.rand(2, H, 5, 5) > 0.4
    keep[..., 0] = True
    expected = m(x, attn_mask=keep)
    for strategy in ("looped", "sdpa"):
        m.strategy = strategy
        torch.testing.assert_close(m(x, attn_mask=keep), expected)


def test_without_output_projection_is_the_concatenated_heads():
    """C4's single head without W_O: the output is Attention(Q W^Q, K W^K, V W^V) itself."""
    m = MultiHeadAttention(D, 1, out_proj=False, dtype=torch.float64)
    assert m.out_proj is None
    x = torch.randn(2, 5, D, dtype=torch.float64)
    w, b = m.in_proj_weight, m.in_proj_bias
    q, k, v = (x @ w[i * D:(i + 1) * D].T + b[i * D:(i + 1) * D] for i in range(3))
    expected = torch.softmax(q @ k.transpose(1, 2) / D ** 0.5, -1) @ v
    torch.testing.assert_close(m(x), expected)
    assert sum(p.numel() for p in m.parameters()) == 3 * D * D + 3 * D


@pytest.mark.parametrize(
    "make, call, message",
    [
        (lambda: MultiHeadAttention(30, 4), None, "d_model=30 is not divisible by num_heads=4"),
        (lambda: MultiHeadAttention(D, 0), None, "num_heads must be a positive integer"),
        (lambda: MultiHeadAttention(D, H, strategy="fused"), None, "unknown strategy 'fused'"),
        (None, lambda m, x: m(x[0]), "query must have 3 dimensions"),
        (None, lambda m, x: m(x[..., :16]), "size 32 in its last dimension"),
        (None, lambda m, x: m(x, x[:1]), "batch size"),
        (None, lambda m, x: m(x, x, x[:, :3]), "same length"),
        (None, lambda m, x: m(x[:, :0]), "empty sequence"),
        (None, lambda m, x: m(x, attn_mask=torch.ones(4, 4, dtype=torch.bool)), r"attn_mask of shape \(4, 4\)"),
        (None, lambda m, x: m(x, key_padding_mask=torch.ones(2, 4, dtype=torch.bool)), "key_padding_mask"),
        (None, lambda m, x: MultiHeadAttention(D, H, strategy="sdpa")(x, need_weights=True), "need_weights"),
    ],
)
def test_bad_input_is_named(make, call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        m = make() if make else MultiHeadAttention(D, H)
        call(m, torch.randn(2, 5, D))
