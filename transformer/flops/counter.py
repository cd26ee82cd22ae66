"""The same FLOPs measured by torch's own counter (FlopCounterMode), to check the model against."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch.utils import flop_counter as fc
from torch.utils.flop_counter import FlopCounterMode


@dataclass(frozen=True)
class Counted:
    """Matmul FLOPs measured by FlopCounterMode; ``backward`` is None when it was not run."""

    forward: int
    backward: int | None
    forward_by_op: Mapping[str, int]
    backward_by_op: Mapping[str, int] | None

    @property
    def train(self) -> int:
        if self.backward is None:
            raise ValueError("the backward pass was not counted: call count(..., backward=True)")
        return self.forward + self.backward


def count(fn: Callable, *args, backward: bool = False, **kwargs) -> Counted:
    """Run ``fn(*args, **kwargs)`` (a module or any callable) under FlopCounterMode; with ``backward``
    also backpropagate the sum of its first floating output and count that separately."""
    register_cpu_sdpa_formulas()
    with FlopCounterMode(display=False) as fwd:
        out = fn(*args, **kwargs)
    bwd = None
    if backward:
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        tensor = next(x for x in outputs if torch.is_tensor(x) and x.is_floating_point())
        loss = tensor.float().sum()
        with FlopCounterMode(display=False) as bwd:
            loss.backward()
    return Counted(
        fwd.get_total_flops(),
        None if bwd is None else bwd.get_total_flops(),
        _by_op(fwd),
        None if bwd is None else _by_op(bwd),
    )


def _by_op(mode: FlopCounterMode) -> dict[str, int]:
    return {str(op): v for op, v in mode.get_flop_counts().get("Global", {}).items()}


_REGISTERED = False


def register_cpu_sdpa_formulas() -> None:
    """Teach the counter the CPU fused attention kernel, with the same formulas as the GPU kernels."""
    global _REGISTERED
    if _REGISTERED:
        return
    aten = torch.ops.aten
    for op, formula in (
        (aten._scaled_dot_product_flash_attention_for_cpu, fc.sdpa_flop_count),
        (aten._scaled_dot_product_flash_attention_for_cpu_backward, fc.sdpa_backward_flop_count),
    ):
        if op not in fc.flop_registry:  # a later torch may know it already

            def shapes_only(*shapes, out_shape=None, _f=formula, **kwargs):
                n = 4 if _f is fc.sdpa_backward_flop_count else 3
                return _f(*shapes[:n])

            fc.register_flop_formula(op)(shapes_only)
    _REGISTERED = True
