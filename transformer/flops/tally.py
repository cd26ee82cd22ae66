"""What every FLOP count is made of: per-component matmul and elementwise tallies, forward and backward."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

ELEMENTWISE: dict[str, tuple[int, int]] = {
    "bias": (1, 1),  # add; its gradient is a sum over rows
    "scale": (1, 1),  # multiply by a constant (1/sqrt(d_k), sqrt(d_model))
    "mask": (1, 1),  # one select or add per score
    "softmax": (5, 4),  # max, subtract, exp, sum, divide; backward y * (g - sum(g * y))
    "relu": (1, 1),
    "gelu": (8, 8),
    "tanh": (1, 2),
    "residual": (1, 0),  # add; the gradient passes through
    "positional": (1, 0),  # add the positional encoding
    "layernorm": (8, 10),  # mean, subtract, square, mean, rsqrt, multiply, scale, shift
    "gru_cell": (10, 16),  # per hidden unit and step: 3 gate sums, 2 sigmoids, tanh, reset product, blend
    "maxout": (1, 1),  # one comparison per pair
}


@dataclass(frozen=True)
class Breakdown:
    """FLOPs of one pass, per component: ``matmul`` (exact, counted) and ``other`` (elementwise convention)."""

    matmul: Mapping[str, int] = field(default_factory=dict)
    other: Mapping[str, int] = field(default_factory=dict)

    @property
    def matmul_total(self) -> int:
        return sum(self.matmul.values())

    @property
    def other_total(self) -> int:
        return sum(self.other.values())

    @property
    def total(self) -> int:
        return self.matmul_total + self.other_total

    def __add__(self, other: Breakdown) -> Breakdown:
        return Breakdown(dict(Counter(self.matmul) + Counter(other.matmul)),
                         dict(Counter(self.other) + Counter(other.other)))

    def grouped(self, depth: int) -> Breakdown:
        """Components summed by the first ``depth`` parts of their dotted names."""
        def group(d):
            out = Counter()
            for name, v in d.items():
                out[".".join(name.split(".")[:depth])] += v
            return dict(out)
        return Breakdown(group(self.matmul), group(self.other))


@dataclass(frozen=True)
class Flops:
    """Analytic FLOPs of one call: forward and backward breakdowns."""

    forward: Breakdown
    backward: Breakdown

    @property
    def train(self) -> Breakdown:
        """Forward plus backward: one training step's work."""
        return self.forward + self.backward

    def __add__(self, other: Flops) -> Flops:
        return Flops(self.forward + other.forward, self.backward + other.backward)

    def rows(self) -> list[dict]:
        """One dict per (pass, kind, component), ready for a pandas DataFrame."""
        return [
            {"pass": p, "kind": kind, "component": name, "flops": v}
            for p, b in (("forward", self.forward), ("backward", self.backward))
            for kind, d in (("matmul", b.matmul), ("other", b.other))
            for name, v in sorted(d.items())
        ]


class Tally:
    """Accumulates FLOPs component by component while a model's structure is walked."""

    def __init__(self):
        self.fwd_mm, self.bwd_mm, self.fwd_other, self.bwd_other = Counter(), Counter(), Counter(), Counter()
        self.prefix = ""
        self.recompute = False  # whether fused attention kernels recompute the scores in their backward

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        outer = self.prefix
        self.prefix = f"{outer}{name}."
        try:
            yield
        finally:
            self.prefix = outer

    def matmul(self, name: str, m: int, n: int, k: int, batch: int = 1, grad_a: bool = True,
               grad_b: bool = True) -> None:
        """(m x k)(k x n), ``batch`` times; its backward needs one matmul per operand that needs a gradient."""
        f = 2 * batch * m * n * k
        self.fwd_mm[self.prefix + name] += f
        self.bwd_mm[self.prefix + name] += f * (int(grad_a) + int(grad_b))

    def linear(self, name: str, rows: int, d_in: int, d_out: int, bias: bool = True, input_grad: bool = True) -> None:
        """y = x W^T + b over ``rows`` rows; W always needs its gradient."""
        self.matmul(name, rows, d_out, d_in, grad_a=input_grad)
        if bias:
            self.elementwise(name, "bias", rows * d_out)

    def elementwise(self, name: str, op: str, numel: int, grad: bool = True) -> None:
        f, b = ELEMENTWISE[op]
        self.fwd_other[self.prefix + name] += f * numel
        if grad:
            self.bwd_other[self.prefix + name] += b * numel

    def flops(self) -> Flops:
        def clean(c):
            return {k: v for k, v in c.items() if v}
        return Flops(Breakdown(clean(self.fwd_mm), clean(self.fwd_other)),
                     Breakdown(clean(self.bwd_mm), clean(self.bwd_other)))
