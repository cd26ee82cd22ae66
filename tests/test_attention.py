"""Equation (1): the two backends agree, masks and causality behave, bad input is named."""

import math

import pytest
import torch

from transformer import causal_mask
from transformer import scaled_dot_product_attention as attn


def qkv(*lead, n_q=5, n_k=7, d_k=8, d_v=6, dtype=torch.float64):
    return (torch.randn(*lead, n_q, d_k, dtype=dtype), torch.randn(*lead, n_k, d_k, dtype=dtype),
            torch.randn(*lead, n_k, d_v, dtype=dtype))


def reference(q, k, v, allowed=None, scale=None):
    """softmax(Q K^T / sqrt(d_k)) V computed the slow, obvious way."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-1, -2) * scale
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("backend", ["math", "sdpa"])
@pytest.mark.parametrize("lead", [(), (3,), (2, 4)])
def test_matches_the_equation(backend, lead):
    q, k, v = qkv(*lead)
    torch.testing.assert_close(attn(q, k, v, backend=backend), reference(q, k, v))


@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_boolean_additive_and_causal_masks(backend):
    q, k, v = qkv(2, 3, n_q=6, n_k=6)
    keep = torch.rand(2, 3, 6, 6) > 0.3
    keep[..., 0] = True  # no fully masked row
    additive = torch.zeros(2, 3, 6, 6, dtype=q.dtype).masked_fill(~keep, float("-inf"))
    expected = reference(q, k, v, keep)
    torch.testing.assert_close(attn(q, k, v, keep, backend=backend), expected)
    torch.testing.assert_close(attn(q, k, v, additive, backend=backend), expected)
    tri = causal_mask(6, 6)
    torch.testing.assert_close(attn(q, k, v, causal=True, backend=backend), reference(q, k, v, tri))
    torch.testing.assert_close(attn(q, k, v, keep, causal=True, backend=backend), reference(q, k, v, keep & tri))


def test_causal_is_top_left_aligned_like_torch():
    q, k, v = qkv(2, n_q=4, n_k=9)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(attn(q, k, v, causal=True), expected)


@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_future_keys_never_change_earlier_outputs(backend):
    """C6: with the causal mask, output i depends on positions <= i only."""
    q, k, v = qkv(2, n_q=8, n_k=8)
    out = attn(q, k, v, causal=True, backend=backend)
    k2, v2 = k.clone(), v.clone()
    k2[:, 5:], v2[:, 5:] = torch.randn_like(k2[:, 5:]), torch.randn_like(v2[:, 5:])
    out2 = attn(q, k2, v2, causal=True, backend=backend)
    torch.testing.assert_close(out[:, :5], out2[:, :5])
    assert not torch.allclose(out[:, 5:], out2[:, 5:])


def test_weights_are_distributions_and_causal_weights_zero_in_the_future():
    q, k, v = qkv(3, n_q=6, n_k=6)
    out, w = attn(q, k, v, causal=True, return_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 6, dtype=w.dtype))
    assert (w.triu(1) == 0).all() and (w >= 0).all()
    torch.testing.assert_close(out, w @ v)


def test_scale_switches_the_sqrt_dk_scaling():
    """C5: scale=1.0 gives softmax(Q K^T) V, sharper weights for large d_k."""
    q, k, v = qkv(4, n_q=16, n_k=16, d_k=256)
    torch.testing.assert_close(attn(q, k, v, scale=1.0), reference(q, k, v, scale=1.0))
    _, scaled = attn(q, k, v, return_weights=True)
    _, unscaled = attn(q, k, v, scale=1.0, return_weights=True)
    assert unscaled.amax(-1).mean() > scaled.amax(-1).mean()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda q, k, v: attn(q, k, v, backend="flash"), "unknown attention backend 'flash'"),
        (lambda q, k, v: attn(q[0, 0, 0], k, v), "q must have"),
        (lambda q, k, v: attn(q, k[0], v), "same rank"),
        (lambda q, k, v: attn(q, k[:1], v[:1]), "leading"),
        (lambda q, k, v: attn(q, k[..., :3], v), "last dimension d_k"),
        (lambda q, k, v: attn(q, k, v[..., :2, :]), "same number of positions"),
        (lambda q, k, v: attn(q[..., :0, :], k, v), "empty sequence"),
        (lambda q, k, v: attn(q, k, v, torch.ones(3, 3, dtype=torch.bool)), "does not broadcast"),
        (lambda q, k, v: attn(q, k, v, torch.ones(5, 7, dtype=torch.int64)), "boolean"),
        (lambda q, k, v: attn(q, k, v, backend="sdpa", return_weights=True), "backend='math'"),
        (lambda q, k, v: attn(q, k, v, dropout_p=1.5), "dropout_p"),
    ],
)
def test_bad_input_is_named(call, message):
    q, k, v = qkv(2, 3)
    with pytest.raises((ValueError, TypeError), match=message):
        call(q, k, v)
