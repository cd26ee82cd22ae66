"""The matrix products a call executes, replayed alone: a measured floor for anything that does them.

``record(fn)`` runs ``fn`` once under torch.profiler (shapes recorded) and keeps every matrix product
the executed aten operators contain, as (batch, m, k, n): ``mm``, ``addmm``, ``_addmm_activation``,
``bmm``, ``baddbmm``, and a fused attention kernel as its two products (Q K^T and weights times V).
The profiler sees inside torch's eval-mode fast paths (``_native_multi_head_attention``,
``_transformer_encoder_layer_fwd``), which a dispatch mode sees only as one opaque operator.

``replay(gemms)`` returns a callable that runs exactly those products on fresh operands into
preallocated outputs: the same BLAS calls with nothing around them (no bias, activation, softmax,
mask, copy or allocation). Timed next to the call it came from, its time is the floor for any
implementation that does the same products with this machine's BLAS: a speed target below it cannot be met
(scripts/compare_with_torch.py prints it for every comparison). A causal fused kernel does only the
products its mask keeps, so its products are recorded over that many key positions per query on
average (rounded up): a floor stays at or below what the kernel does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch.profiler import ProfilerActivity, profile

from .profiler import quiet_kineto

#: operator name -> index of (A, B) in its inputs: C = A @ B (after a bias or accumulator input)
PRODUCTS = {"aten::mm": 0, "aten::bmm": 0, "aten::addmm": 1, "aten::_addmm_activation": 1, "aten::baddbmm": 1}
#: fused attention kernels: inputs q, k, v first; ``is_causal`` at this input position
ATTENTION = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": 6,
}


@dataclass(frozen=True)
class Gemm:
    """C (batch x m x n) = A (batch x m x k) @ B (batch x k x n); batch 0 for a plain 2-D product."""

    batch: int
    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        return 2 * max(self.batch, 1) * self.m * self.k * self.n


def record(fn: Callable[[], object]) -> list[Gemm]:
    """The matrix products of one call of ``fn``, in execution order."""
    quiet_kineto("cpu")  # CPU events only
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    gemms: list[Gemm] = []
    for event in prof.events():  # no product here calls another: each is recorded once
        if event.name in PRODUCTS:
            gemms.append(_product(event.input_shapes[PRODUCTS[event.name]:][:2]))
        elif event.name in ATTENTION:
            gemms.extend(_attention(event.input_shapes[:3], bool(event.concrete_inputs[ATTENTION[event.name]])))
    return gemms


def _product(shapes) -> Gemm:
    a, b = shapes
    if len(a) == 2:
        return Gemm(0, a[0], a[1], b[1])
    return Gemm(a[0], a[1], a[2], b[2])


def _attention(shapes, causal: bool) -> list[Gemm]:
    """Q K^T and weights times V of a fused kernel over (..., L, E) queries and (..., S, E) keys."""
    q, k, v = shapes
    batch, n_q, n_k = math.prod(q[:-2]), q[-2], k[-2]
    if causal:  # query i sees keys 0..i (top-left aligned, as torch's kernels)
        n_k = -(-sum(min(i + 1, n_k) for i in range(n_q)) // n_q)
    return [Gemm(batch, n_q, q[-1], n_k), Gemm(batch, n_q, n_k, v[-1])]


def replay(gemms: list[Gemm], device: str = "cpu", dtype: torch.dtype = torch.float32) -> Callable[[], None]:
    """A callable that runs ``gemms`` on their own operands (fresh random ones, each product its own, as
    each layer has its own weights) into preallocated outputs. On a GPU the caller synchronises."""
    calls = []
    for g in gemms:
        lead = (g.batch,) if g.batch else ()
        a, b = (torch.randn(*lead, *shape, device=device, dtype=dtype) for shape in ((g.m, g.k), (g.k, g.n)))
        out = torch.empty(*lead, g.m, g.n, device=device, dtype=dtype)
        calls.append(partial(torch.bmm if g.batch else torch.mm, a, b, out=out))

    def run() -> None:
        for call in calls:
            call()

    return run
