"""Multi-head attention, section 3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), with d_k = d_v = d_model / h.

One set of weights, three execution strategies that compute the same function (claim C3):
- ``"batched"``: one packed Q/K/V projection, the heads as a batch dimension, one matmul for all heads;
- ``"looped"``: the picture taken literally: each head with its own three projections (its rows of
  the packed weight), computed one after another in a Python loop, then concatenated;
- ``"sdpa"``: packed projections and torch's fused attention kernel.

The module is batch-first: inputs are (batch, length, d_model). Masks: ``attn_mask`` follows torch's
SDPA convention (boolean True = may attend, or additive floats) with shape (n_q, n_k) or
(batch or 1, heads or 1, n_q, n_k); ``key_padding_mask`` is (batch, n_k) with True = padding, as in
torch.nn.MultiheadAttention.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from ._validation import check_bool, check_choice, check_heads, check_probability, check_tensor
from .attention import scaled_dot_product_attention

STRATEGIES = ("batched", "looped", "sdpa")


class MultiHeadAttention(nn.Module):
    """Multi-head attention with packed W^Q, W^K, W^V (rows head by head) and an optional W^O (section 3.2.2)."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        strategy: str = "batched",
        bias: bool = True,
        out_proj: bool = True,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.d_head = check_heads(d_model, num_heads)
        self.d_model, self.num_heads = d_model, num_heads
        self.strategy = check_choice("strategy", strategy, STRATEGIES)
        self.dropout = check_probability("dropout", dropout)
        check_bool("bias", bias)
        check_bool("out_proj", out_proj)
        factory = {"device": device, "dtype": dtype}
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model, **factory))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * d_model, **factory)) if bias else None
        self.out_proj = nn.Linear(d_model, d_model, bias=bias, **factory) if out_proj else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections and zero biases, as torch.nn.MultiheadAttention initialises them."""
        nn.init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
        if self.out_proj is not None and self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention, strategy: str = "batched") -> MultiHeadAttention:
        """A copy of ``module``'s weights; outputs then match it (for batch-first inputs)."""
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"from_torch expects torch.nn.MultiheadAttention, got {type(module).__name__}")
        if not module._qkv_same_embed_dim or module.bias_k is not None or module.add_zero_attn:
            raise ValueError("from_torch supports kdim == vdim == embed_dim, no bias_k/bias_v and add_zero_attn=False")
        w = module.in_proj_weight
        mha = cls(
            module.embed_dim, module.num_heads, strategy=strategy, bias=module.in_proj_bias is not None,
            dropout=module.dropout, device=w.device, dtype=w.dtype,
        )
        with torch.no_grad():
            mha.in_proj_weight.copy_(w)
            mha.out_proj.weight.copy_(module.out_proj.weight)
            if mha.in_proj_bias is not None:
                mha.in_proj_bias.copy_(module.in_proj_bias)
                mha.out_proj.bias.copy_(module.out_proj.bias)
        return mha

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, strategy={self.strategy!r}, "
                f"out_proj={self.out_proj is not None}")

    # -- the forward pass ------------------------------------------------------------------------

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ):
        """Self-attention when key and value are omitted, cross-attention otherwise (n_q may differ from n_k).

        Returns (batch, n_q, d_model), or with ``need_weights`` (not for strategy 'sdpa') also the
        per-head attention weights (batch, heads, n_q, n_k).
        """
        check_bool("causal", causal)
        check_bool("need_weights", need_weights)
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        mask = self._combine_masks(attn_mask, key_padding_mask, query.shape[0], query.shape[1], key.shape[1])
        if need_weights and self.strategy == "sdpa":
            raise ValueError("need_weights=True needs strategy 'batched' or 'looped': the fused kernel never forms "
                             "the weights")
        if self.strategy == "looped":
            concat, weights = self._looped(query, key, value, mask, causal, need_weights)
        else:
            q, k, v = self.project_qkv(query, key, value)
            heads, weights = self.attend(q, k, v, mask, causal, need_weights)
            concat = self.concat_heads(heads)
        out = self.output_projection(concat)
        return (out, weights) if need_weights else out

    def project_qkv(self, query, key, value):
        """Q W^Q, K W^K, V W^V for all heads at once, each as (batch, heads, length, d_head)."""
        w, b = self.in_proj_weight, self.in_proj_bias
        if key is query and value is query:
            with record_function("mha.qkv_proj"):
                q, k, v = F.linear(query, w, b).chunk(3, dim=-1)
        else:
            q = self.project_q(query)
            k, v = self.project_kv(key) if value is key else (self._project(key, 1), self._project(value, 2))
            return q, k, v
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def project_q(self, query: torch.Tensor) -> torch.Tensor:
        """Q W^Q as (batch, heads, n_q, d_head)."""
        return self.split_heads(self._project(query, 0, "mha.q_proj"))

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """X W^K and X W^V from one packed matmul, each (batch, heads, n, d_head)."""
        d = self.d_model
        b = None if self.in_proj_bias is None else self.in_proj_bias[d:]
        with record_function("mha.kv_proj"):
            k, v = F.linear(x, self.in_proj_weight[d:], b).chunk(2, dim=-1)
        return self.split_heads(k), self.split_heads(v)

    def _project(self, x: torch.Tensor, which: int, label: str | None = None) -> torch.Tensor:
        rows = slice(which * self.d_model, (which + 1) * self.d_model)
        b = None if self.in_proj_bias is None else self.in_proj_bias[rows]
        with record_function(label or ("mha.q_proj", "mha.k_proj", "mha.v_proj")[which]):
            return F.linear(x, self.in_proj_weight[rows], b)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, n, d_model) -> (batch, heads, n, d_head)."""
        return x.unflatten(-1, (self.num_heads, self.d_head)).transpose(1, 2)

    def attend(self, q, k, v, mask=None, causal=False, need_weights=False):
        """All heads at once: the batched strategy uses the written-out equation, 'sdpa' the fused kernel."""
        p = self.dropout if self.training else 0.0
        backend = "sdpa" if self.strategy == "sdpa" else "math"
        out = scaled_dot_product_attention(
            q, k, v, mask, causal=causal, dropout_p=p, backend=backend, return_weights=need_weights
        )
        return out if need_weights else (out, None)

    def concat_heads(self, heads: torch.Tensor) -> torch.Tensor:
        """Concat(head_1, ..., head_h): (batch, heads, n, d_head) -> (batch, n, d_model)."""
        with record_function("mha.concat"):
            return heads.transpose(1, 2).flatten(2)

    def output_projection(self, concat: torch.Tensor) -> torch.Tensor:
        """The final W^O, or nothing when the module was built with ``out_proj=False``."""
        if self.out_proj is None:
            return concat
        with record_function("mha.out_proj"):
            return self.out_proj(concat)

    def _looped(self, query, key, value, mask, causal, need_weights):
        """One head at a time, each with its own three projections, as in the seed's picture."""
        p = self.dropout if self.training else 0.0
        d, dh = self.d_model, self.d_head
        w, b = self.in_proj_weight, self.in_proj_bias
        outs, weights = [], []
        for i in range(self.num_heads):
            rows = [slice(j * d + i * dh, j * d + (i + 1) * dh) for j in range(3)]
            with record_function("mha.head_proj"):
                q, k, v = (F.linear(x, w[r], None if b is None else b[r])
                           for x, r in zip((query, key, value), rows, strict=True))
            head_mask = None if mask is None else mask[:, i if mask.shape[1] > 1 else 0]
            out = scaled_dot_product_attention(
                q, k, v, head_mask, causal=causal, dropout_p=p, backend="math", return_weights=need_weights
            )
            if need_weights:
                out, wts = out
                weights.append(wts)
            outs.append(out)
        with record_function("mha.concat"):
            concat = torch.cat(outs, dim=-1)
        return concat, (torch.stack(weights, dim=1) if need_weights else None)

    # -- checks ----------------------------------------------------------------------------------

    def _check_inputs(self, query, key, value) -> None:
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, x, 3, last=self.d_model)
        if not (query.shape[0] == key.shape[0] == value.shape[0]):
            raise ValueError(f"query, key, value must share the batch size, got {query.shape[0]}, {key.shape[0]}, "
                             f"{value.shape[0]}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"key and value must have the same length, got {key.shape[1]} and {value.shape[1]}")
        weights = self.in_proj_weight.dtype
        for name, x in (("query", query), ("key", key), ("value", value)):
            if not x.is_floating_point():
                raise TypeError(f"{name} must be a floating-point tensor of the module's dtype {weights}, "
                                f"got {x.dtype}")
            if x.dtype != weights:
                raise TypeError(f"{name} has dtype {x.dtype} but the module's weights are {weights}: convert one "
                                f"(module.to({x.dtype}) or {name}.to({weights}))")

    def _combine_masks(self, attn_mask, key_padding_mask, batch, n_q, n_k):
        """One mask of shape (batch or 1, heads or 1, n_q, n_k), or None."""
        mask = None
        if attn_mask is not None:
            ok_shapes = {(n_q, n_k)} | {(b, h, n_q, n_k) for b in (1, batch) for h in (1, self.num_heads)}
            if tuple(attn_mask.shape) not in ok_shapes:
                raise ValueError(
                    f"attn_mask of shape {tuple(attn_mask.shape)} does not fit: expected ({n_q}, {n_k}) or "
                    f"(batch or 1, heads or 1, {n_q}, {n_k}) with batch={batch}, heads={self.num_heads}"
                )
            mask = attn_mask if attn_mask.dim() == 4 else attn_mask[None, None]
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (batch, n_k):
                raise ValueError(
                    f"key_padding_mask must be a boolean ({batch}, {n_k}) tensor with True = padding, got "
                    f"{key_padding_mask.dtype} {tuple(key_padding_mask.shape)}"
                )
            keep = ~key_padding_mask[:, None, None, :]
            if mask is None:
                mask = keep
            elif mask.dtype == torch.bool:
                mask = mask & keep
            else:
                mask = mask.masked_fill(~keep, float("-inf"))
        return mask
