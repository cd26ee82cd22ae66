"""Head-parallel multi-head attention and encoder layer on torch.distributed (tensor parallelism as in
Megatron-LM), for the claim that the heads of section 3.2.2 are independent and so parallelise: each
rank of a process group holds its heads' rows of W^Q, W^K, W^V and computes those heads alone.

Concat(head_1, ..., head_h) W^O can then be finished two ways, both here, since the claim is that the
concatenation is free:
- ``"allreduce"``: each rank multiplies its heads by its own columns of W^O (row-parallel W^O) and the
  partial outputs are summed with one all-reduce of (batch, n, d_model);
- ``"allgather"``: the head outputs are all-gathered into their offsets of the concatenation, then
  every rank applies the whole (replicated) W^O.

The output is replicated on every rank. Gradients follow Megatron's two operators: the replicated
input's gradient is all-reduced in the backward pass (``_copy_to_ranks``), the all-reduce of the
partial outputs passes its gradient through unchanged (``_reduce_from_ranks``), and the all-gather hands
each rank the slice of the gradient that belongs to its heads (``_gather_from_ranks``). Built from a
single-device module with ``from_single``, the same weights give the same output and gradients.

The encoder layer splits the FFN the same way: W_1 by columns (each rank d_ff / world of the hidden
units), W_2 by rows, one all-reduce; LayerNorms and biases that act on the full width are replicated.
"""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from ._validation import check_bool, check_choice, check_probability
from .attention import scaled_dot_product_attention
from .layers import EncoderLayer
from .multihead import MultiHeadAttention

COMBINES = ("allreduce", "allgather")


# -- the collectives, as autograd functions (Megatron's f and g) ---------------------------------------

class _CopyToRanks(torch.autograd.Function):
    """Forward: the replicated input as it is. Backward: each rank holds the gradient of its own heads'
    use of the input; their sum, all-reduced, is the input's gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromRanks(torch.autograd.Function):
    """Forward: the sum of every rank's partial output (all-reduce). Backward: the output is replicated,
    so each partial's gradient is the output's gradient, unchanged."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromRanks(torch.autograd.Function):
    """Forward: every rank's slice of the last dimension gathered into its offset (all-gather). Backward:
    each rank keeps the slice of the (replicated) gradient at its own offset."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group, ctx.width = group, x.shape[-1]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        rank = dist.get_rank(ctx.group)
        return grad[..., rank * ctx.width:(rank + 1) * ctx.width].contiguous(), None


def _copy_to_ranks(x, group):
    return _CopyToRanks.apply(x, group)


def _reduce_from_ranks(x, group):
    with record_function("parallel.all_reduce"):
        return _ReduceFromRanks.apply(x, group)


def _gather_from_ranks(x, group):
    with record_function("parallel.all_gather"):
        return _GatherFromRanks.apply(x, group)


@contextlib.contextmanager
def local_only():
    """The head-parallel modules without their collectives: each rank's share of the compute alone (the
    all-reduce becomes the identity, the all-gather repeats the local slice to the full width)."""
    global _copy_to_ranks, _reduce_from_ranks, _gather_from_ranks
    saved = _copy_to_ranks, _reduce_from_ranks, _gather_from_ranks
    _reduce_from_ranks = lambda x, group: x  # noqa: E731
    _gather_from_ranks = lambda x, group: x.repeat(*([1] * (x.dim() - 1)), dist.get_world_size(group))  # noqa: E731
    _copy_to_ranks = lambda x, group: x  # noqa: E731
    try:
        yield
    finally:
        _copy_to_ranks, _reduce_from_ranks, _gather_from_ranks = saved


def _world(group) -> tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("head-parallel modules need torch.distributed initialised "
                           "(torchrun, or dist.init_process_group); none is")
    return dist.get_world_size(group), dist.get_rank(group)


def same_shapes_on_every_rank(group, **inputs: torch.Tensor) -> None:
    """ValueError on every rank, naming each rank's shapes, when the ranks were given inputs of different
    shapes: the collectives would then carry different sizes, which aborts gloo and hangs NCCL."""
    dims = max(t.dim() for t in inputs.values())
    mine = torch.tensor([d for t in inputs.values() for d in (*t.shape, *[0] * (dims - t.dim()))],
                        dtype=torch.int64, device=next(iter(inputs.values())).device)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    if any(not torch.equal(other, mine) for other in every):
        def told(shapes):
            parts = shapes.view(len(inputs), dims).tolist()
            return ", ".join(f"{name} {tuple(d for d in p if d)}" for name, p in zip(inputs, parts, strict=True))
        raise ValueError("head-parallel attention needs inputs of the same shapes on every rank; got "
                         + "; ".join(f"rank {r}: {told(s)}" for r, s in enumerate(every)))


def check_split(name: str, total: int, world: int) -> int:
    """``total`` (heads, or FFN units) split evenly over ``world`` ranks; the share per rank."""
    if total % world:
        raise ValueError(f"{name}={total} is not divisible by the world size {world}; "
                         f"run with a number of ranks that divides {total}")
    return total // world


# -- attention ----------------------------------------------------------------------------------------

class HeadParallelMultiHeadAttention(nn.Module):
    """Multi-head attention (section 3.2.2) with its heads split over the ranks of ``group``."""

    def __init__(self, d_model: int, num_heads: int, *, combine: str = "allreduce", strategy: str = "sdpa",
                 bias: bool = True, dropout: float = 0.0, group=None, device=None, dtype=None):
        super().__init__()
        self.world, self.rank = _world(group)
        self.group = group
        # the single-device module's checks and mask handling (not a submodule: its weights are not used)
        object.__setattr__(self, "_spec", MultiHeadAttention(d_model, num_heads, strategy=strategy, bias=bias,
                                                             device="meta"))
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, self._spec.d_head
        self.local_heads = check_split("num_heads", num_heads, self.world)
        self.combine = check_choice("combine", combine, COMBINES)
        self.strategy = strategy
        self.dropout = check_probability("dropout", dropout)
        check_bool("bias", bias)
        width, f = self.local_heads * self.d_head, {"device": device, "dtype": dtype}
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, d_model, **f))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * width, **f)) if bias else None
        out_in = width if combine == "allreduce" else d_model
        self.out_proj_weight = nn.Parameter(torch.empty(d_model, out_in, **f))
        self.out_proj_bias = nn.Parameter(torch.zeros(d_model, **f)) if bias else None
        #: every forward first checks that the ranks were given inputs of one shape (one small all-gather);
        #: a benchmark that has checked its inputs once turns it off to time the layer alone
        self.check_shapes = True

    @property
    def head_slice(self) -> slice:
        """This rank's columns of the concatenated heads (and rows of each of W^Q, W^K, W^V)."""
        width = self.local_heads * self.d_head
        return slice(self.rank * width, (self.rank + 1) * width)

    @classmethod
    def from_single(cls, mha: MultiHeadAttention, combine: str = "allreduce",
                    group=None) -> HeadParallelMultiHeadAttention:
        """This rank's share of ``mha``'s weights (every rank passes the same module)."""
        if mha.out_proj is None:
            raise ValueError("from_single needs a MultiHeadAttention with its W^O (out_proj=True)")
        w = mha.in_proj_weight
        par = cls(mha.d_model, mha.num_heads, combine=combine, strategy=mha.strategy,
                  bias=mha.in_proj_bias is not None, dropout=mha.dropout, group=group, device=w.device, dtype=w.dtype)
        rows, d = par.head_slice, mha.d_model
        with torch.no_grad():
            par.in_proj_weight.copy_(torch.cat([w[j * d:(j + 1) * d][rows] for j in range(3)]))
            wo = mha.out_proj.weight
            par.out_proj_weight.copy_(wo[:, rows] if combine == "allreduce" else wo)
            if par.in_proj_bias is not None:
                b = mha.in_proj_bias
                par.in_proj_bias.copy_(torch.cat([b[j * d:(j + 1) * d][rows] for j in range(3)]))
                par.out_proj_bias.copy_(mha.out_proj.bias)
        return par

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, ranks={self.world}, rank={self.rank}, "
                f"local_heads={self.local_heads}, combine={self.combine!r}, strategy={self.strategy!r}")

    def forward(self, query, key=None, value=None, *, attn_mask=None, key_padding_mask=None, causal=False):
        """Self-attention when key and value are omitted; (batch, n_q, d_model), the same on every rank."""
        key = query if key is None else key
        value = key if value is None else value
        self._spec._check_inputs(query, key, value)
        check_bool("causal", causal)
        if self.check_shapes and self.world > 1:
            same_shapes_on_every_rank(self.group, query=query, key=key, value=value)
        mask = self._spec._combine_masks(attn_mask, key_padding_mask, query.shape[0], query.shape[1], key.shape[1])
        if mask is not None and mask.shape[1] > 1:  # a mask per head: this rank's heads
            mask = mask[:, self.rank * self.local_heads:(self.rank + 1) * self.local_heads]
        self_attention = key is query and value is query
        query = _copy_to_ranks(query, self.group)
        key, value = (query, query) if self_attention else (_copy_to_ranks(key, self.group),
                                                            _copy_to_ranks(value, self.group))
        with record_function("mha.qkv_proj"):
            q, k, v = (self._project(x, j) for j, x in enumerate((query, key, value)))
        backend = "sdpa" if self.strategy == "sdpa" else "math"
        heads = scaled_dot_product_attention(q, k, v, mask, causal=causal, backend=backend,
                                             dropout_p=self.dropout if self.training else 0.0)
        with record_function("mha.concat"):
            local = heads.transpose(1, 2).flatten(2)  # (batch, n_q, local_heads * d_head)
        if self.combine == "allreduce":
            with record_function("mha.out_proj"):
                partial = F.linear(local, self.out_proj_weight)
            out = _reduce_from_ranks(partial, self.group)
            return out if self.out_proj_bias is None else out + self.out_proj_bias
        concat = _gather_from_ranks(local, self.group)
        with record_function("mha.out_proj"):
            return F.linear(concat, self.out_proj_weight, self.out_proj_bias)

    def _project(self, x, j):
        width = self.local_heads * self.d_head
        rows = slice(j * width, (j + 1) * width)
        b = None if self.in_proj_bias is None else self.in_proj_bias[rows]
        y = F.linear(x, self.in_proj_weight[rows], b)
        return y.unflatten(-1, (self.local_heads, self.d_head)).transpose(1, 2)


# -- the encoder layer --------------------------------------------------------------------------------

class HeadParallelFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (section 3.3) with W_1 split by columns and W_2 by rows."""

    def __init__(self, ffn, group=None):
        super().__init__()
        self.world, self.rank = _world(group)
        self.group = group
        d_ff = ffn.linear1.out_features
        share = check_split("d_ff", d_ff, self.world)
        units = slice(self.rank * share, (self.rank + 1) * share)
        self.activation, self.dropout = ffn.activation, ffn.dropout
        with torch.no_grad():
            self.w1 = nn.Parameter(ffn.linear1.weight[units].clone())
            self.b1 = nn.Parameter(ffn.linear1.bias[units].clone())
            self.w2 = nn.Parameter(ffn.linear2.weight[:, units].clone())
            self.b2 = nn.Parameter(ffn.linear2.bias.clone())

    def forward(self, x):
        with record_function("ffn"):
            hidden = self.dropout(self.activation(F.linear(_copy_to_ranks(x, self.group), self.w1, self.b1)))
            return _reduce_from_ranks(F.linear(hidden, self.w2), self.group) + self.b2


class HeadParallelEncoderLayer(nn.Module):
    """An encoder layer (section 3.1) with its attention heads and FFN units split over the ranks; the
    Add & Norm steps are replicated."""

    def __init__(self, layer: EncoderLayer, combine: str = "allreduce", group=None):
        super().__init__()
        self.self_attn = HeadParallelMultiHeadAttention.from_single(layer.self_attn, combine, group)
        self.ffn = HeadParallelFeedForward(layer.ffn, group)
        self.norm_first = layer.norm_first
        self.norm1, self.norm2 = layer.norm1, layer.norm2  # replicated: the same module on every rank
        self.dropout1, self.dropout2 = layer.dropout1, layer.dropout2

    @classmethod
    def from_single(cls, layer: EncoderLayer, combine: str = "allreduce", group=None) -> HeadParallelEncoderLayer:
        return cls(copy.deepcopy(layer), combine, group)

    def forward(self, x, key_padding_mask=None):
        x = self._sublayer(x, lambda z: self.self_attn(z, key_padding_mask=key_padding_mask), self.norm1,
                           self.dropout1)
        return self._sublayer(x, self.ffn, self.norm2, self.dropout2)

    _sublayer = EncoderLayer._sublayer


__all__ = ["COMBINES", "HeadParallelMultiHeadAttention", "HeadParallelFeedForward", "HeadParallelEncoderLayer",
           "check_split", "local_only", "same_shapes_on_every_rank"]
