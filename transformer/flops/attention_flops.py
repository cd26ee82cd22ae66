"""FLOPs of equation (1) and of multi-head attention (section 3.2)."""

from __future__ import annotations

import torch

from .._validation import check_bool, check_choice, check_heads, check_positive, check_positives, check_probability
from ..attention import BACKENDS
from ..multihead import STRATEGIES
from .tally import Flops, Tally


def attention(batch: int, n_q: int, n_k: int, d_k: int, d_v: int | None = None, *, backend: str = "math",
              masked: bool = False, causal: bool = False, inputs_require_grad: bool = False,
              dropout_p: float = 0.0, device="cpu", dtype=torch.float32) -> Flops:
    """Equation (1) over ``batch`` independent (batch x head) slices of 4-D inputs: scores, mask,
    softmax, weights*V. ``device``, ``dtype`` and ``dropout_p`` only decide, for backend 'sdpa',
    whether torch runs a fused kernel (see ``sdpa_recomputes``)."""
    d_v = d_k if d_v is None else d_v
    check_positives(batch=batch, n_q=n_q, n_k=n_k, d_k=d_k, d_v=d_v)
    check_probability("dropout_p", dropout_p)
    for name, flag in (("masked", masked), ("causal", causal), ("inputs_require_grad", inputs_require_grad)):
        check_bool(name, flag)
    t = Tally()
    recompute = backend == "sdpa" and sdpa_recomputes(d_k, d_v, masked=masked, causal=causal, dropout_p=dropout_p,
                                                      device=device, dtype=dtype)
    _attention(t, batch, n_q, n_k, d_k, d_v, backend, masked or causal, inputs_require_grad, recompute)
    return t.flops()


def sdpa_recomputes(d_k: int, d_v: int | None = None, *, masked: bool = False, causal: bool = False,
                    dropout_p: float = 0.0, device="cpu", dtype=torch.float32) -> bool:
    """Whether torch.nn.functional.scaled_dot_product_attention picks a fused kernel (whose backward
    recomputes Q K^T: 5 attention matmuls) rather than its math fallback (4), as this torch build
    decides for 4-D inputs with these settings. On the CPU the fused kernel needs d_k == d_v and no
    dropout."""
    d_v = d_k if d_v is None else d_v
    check_positive("d_k", d_k)
    check_positive("d_v", d_v)
    check_probability("dropout_p", dropout_p)
    q, v = torch.zeros(1, 1, 1, d_k, device=device, dtype=dtype), torch.zeros(1, 1, 1, d_v, device=device, dtype=dtype)
    mask = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device) if masked else None
    if mask is not None and causal:
        causal = False  # scaled_dot_product_attention (ours) merges the two into one mask
    return torch._fused_sdp_choice(q, q, v, mask, dropout_p, causal) != 0  # 0 is SDPBackend.MATH


def _attention(t: Tally, batch, n_q, n_k, d_k, d_v, backend, masked, grad, recompute) -> None:
    check_choice("attention backend", backend, BACKENDS)
    for name, v in (("batch", batch), ("n_q", n_q), ("n_k", n_k), ("d_k", d_k), ("d_v", d_v)):
        check_positive(name, v)
    scores = batch * n_q * n_k
    t.elementwise("scale", "scale", batch * n_q * d_k, grad)
    t.matmul("scores", n_q, n_k, d_k, batch, grad, grad)
    if masked:
        t.elementwise("mask", "mask", scores, grad)
    t.elementwise("softmax", "softmax", scores, grad)
    t.matmul("weights_v", n_q, d_v, n_k, batch, grad, grad)
    if recompute and grad:  # the fused backward recomputes Q K^T before the 4 gradient matmuls
        t.bwd_mm[t.prefix + "scores"] += 2 * batch * n_q * n_k * d_k


def causal_pairs(n_q: int, n_k: int) -> int:
    """Query-key pairs a causal mask keeps (top-left aligned): the useful share of the n_q*n_k scores."""
    check_positives(n_q=n_q, n_k=n_k)
    return sum(min(i + 1, n_k) for i in range(n_q))


def useful_attention_flops(batch: int, n_q: int, n_k: int, d_head: int, causal: bool = False) -> int:
    """FlashAttention's convention for throughput: 4 * pairs * d_head per slice, masked pairs not counted."""
    check_positives(batch=batch, n_q=n_q, n_k=n_k, d_head=d_head)
    check_bool("causal", causal)
    pairs = causal_pairs(n_q, n_k) if causal else n_q * n_k
    return 4 * batch * pairs * d_head


def multi_head_attention(batch: int, n_q: int, d_model: int, num_heads: int, n_k: int | None = None, *,
                         strategy: str = "batched", out_proj: bool = True, bias: bool = True, masked: bool = False,
                         causal: bool = False, inputs_require_grad: bool = False, dropout_p: float = 0.0,
                         device="cpu", dtype=torch.float32) -> Flops:
    """MultiHeadAttention of section 3.2.2; self-attention when n_k is None. Matmul FLOPs do not depend on h.
    ``device``, ``dtype`` and ``dropout_p`` matter only through ``sdpa_recomputes`` (strategy 'sdpa')."""
    check_positives(batch=batch, n_q=n_q, **({} if n_k is None else {"n_k": n_k}))
    check_choice("strategy", strategy, STRATEGIES)
    d_head = check_heads(d_model, num_heads)
    check_probability("dropout_p", dropout_p)
    for name, flag in (("out_proj", out_proj), ("bias", bias), ("masked", masked), ("causal", causal),
                       ("inputs_require_grad", inputs_require_grad)):
        check_bool(name, flag)
    recompute = strategy == "sdpa" and sdpa_recomputes(d_head, masked=masked, causal=causal, dropout_p=dropout_p,
                                                       device=device, dtype=dtype)
    t = Tally()
    tally_mha(t, batch, n_q, n_q if n_k is None else n_k, d_model, num_heads, strategy, out_proj, bias,
              masked or causal, inputs_require_grad, recompute)
    return t.flops()


def tally_mha(t, batch, n_q, n_k, d_model, h, strategy, out_proj, bias, masked, input_grad, recompute,
         project_kv: bool = True) -> None:
    check_choice("strategy", strategy, STRATEGIES)
    d_head = check_heads(d_model, h)
    t.linear("q_proj", batch * n_q, d_model, d_model, bias, input_grad)
    if project_kv:
        t.linear("k_proj", batch * n_k, d_model, d_model, bias, input_grad)
        t.linear("v_proj", batch * n_k, d_model, d_model, bias, input_grad)
    backend = "sdpa" if strategy == "sdpa" else "math"
    _attention(t, batch * h, n_q, n_k, d_head, d_head, backend, masked, True, recompute)
    if out_proj:
        t.linear("out_proj", batch * n_q, d_model, d_model, bias, True)
