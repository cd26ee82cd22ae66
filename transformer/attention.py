"""Scaled dot-product attention, equation (1) of the paper: softmax(Q K^T / sqrt(d_k)) V (section 3.2.1).

Two interchangeable backends compute the same function:
- ``"math"``: the equation written out (scores, mask, softmax, weights times V), each step labelled
  with ``torch.profiler.record_function`` so that profiles read in the paper's terms; it can return
  the attention weights.
- ``"sdpa"``: torch's fused ``scaled_dot_product_attention``, which dispatches to the flash,
  memory-efficient or cuDNN kernels on a GPU and to a fused flash-style kernel on the CPU.

Masks follow torch's SDPA convention: a boolean mask is True where a query may attend to a key; a
floating mask is added to the scores. ``causal=True`` lets query i see keys 0..i (top-left aligned,
as torch does when n_q != n_k).

A query row whose every key is masked (a key padding mask that is all True, or a left-padded target
under the causal mask) attends to nothing: its weights are all 0 and its output is the zero vector,
with both backends and every multi-head strategy. torch's fused kernel does the same; the math
backend uses torch's ``_safe_softmax`` (softmax, then 0 for rows that are all -inf) whenever a mask
is given. A plain softmax would give NaN there, and one NaN row in V turns every output row that
attends to it into NaN in the next layer.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from ._validation import check_bool, check_choice, check_positive_float, check_probability, check_tensor

BACKENDS = ("math", "sdpa")


def causal_mask(n_q: int, n_k: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean (n_q, n_k) mask, True where key j <= query i (the decoder's mask, section 3.2.3)."""
    return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril()


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    backend: str = "math",
    return_weights: bool = False,
):
    """Attention(Q, K, V) = softmax(Q K^T * scale + mask) V over the last two dimensions.

    q: (..., n_q, d_k), k: (..., n_k, d_k), v: (..., n_k, d_v), the same leading dimensions.
    scale defaults to 1/sqrt(d_k); pass ``scale=1.0`` to switch the scaling off (claim C5).
    Returns the output (..., n_q, d_v), and with ``return_weights`` (math backend only) also the
    attention weights (..., n_q, n_k).
    """
    check_choice("attention backend", backend, BACKENDS)
    _check_qkv(q, k, v)
    n_q, n_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        _check_mask(mask, q, n_k)
    check_probability("dropout_p", dropout_p)
    check_bool("causal", causal)
    check_bool("return_weights", return_weights)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_positive_float("scale", scale)
    if backend == "sdpa":
        if return_weights:
            raise ValueError("return_weights=True needs backend='math': the fused 'sdpa' kernel never forms the "
                             "weights")
        if causal and mask is not None:  # torch's kernel takes one or the other
            mask, causal = merge_causal(mask, n_q, n_k), False
        with record_function("attention.sdpa"):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal,
                                                  scale=scale)
    # only a given mask can mask a whole row: the causal mask alone keeps key 0 for every query
    softmax = torch.softmax if mask is None else torch._safe_softmax
    if causal:
        mask = merge_causal(mask, n_q, n_k, device=q.device)
    return _math_attention(q, k, v, mask, scale, dropout_p, return_weights, softmax)


def _math_attention(q, k, v, mask, scale, dropout_p, return_weights, softmax=torch.softmax):
    """Equation (1) step by step."""
    with record_function("attention.scores"):
        scores = torch.matmul(q * scale, k.transpose(-2, -1))
    if mask is not None:
        with record_function("attention.mask"):
            if mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, float("-inf"))
            else:
                scores = scores + mask
    with record_function("attention.softmax"):
        weights = softmax(scores, dim=-1)
    if dropout_p:
        weights = F.dropout(weights, p=dropout_p)
    with record_function("attention.weights_v"):
        out = torch.matmul(weights, v)
    return (out, weights) if return_weights else out


def merge_causal(mask: torch.Tensor | None, n_q: int, n_k: int, device=None) -> torch.Tensor:
    """One mask that applies both ``mask`` and the causal mask."""
    tri = causal_mask(n_q, n_k, device=device if mask is None else mask.device)
    if mask is None:
        return tri
    if mask.dtype == torch.bool:
        return mask & tri
    return mask.masked_fill(~tri, float("-inf"))


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, tuple(range(2, 9)))
    if not (q.dim() == k.dim() == v.dim()):
        raise ValueError(f"q, k, v must have the same rank, got shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            f"q, k, v must share their leading (batch, head) dimensions, got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions, got {k.shape[-2]} and {v.shape[-2]}")
    if not (q.dtype == k.dtype == v.dtype) or not q.is_floating_point():
        raise TypeError(f"q, k, v must share one floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}")


def _check_mask(mask: torch.Tensor, q: torch.Tensor, n_k: int) -> None:
    target = (*q.shape[:-1], n_k)
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and mask.dtype != q.dtype:
        raise TypeError(f"mask must be boolean (True = attend) or additive with the query's dtype {q.dtype}, "
                        f"got {mask.dtype}")
    try:
        ok = mask.dim() <= len(target) and torch.broadcast_shapes(mask.shape, target) == torch.Size(target)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape {target}")
