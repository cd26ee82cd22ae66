"""What a benchmark area is made of: the ``Area`` definition, the ``Prepared`` case it builds, and the helpers
its builder uses (devices, synchronised callables, a training step, the threads a block runs on).

An area is one module, ``benchmarks/bench_<name>.py``: its ``AREA = Area(...)`` (axes per grid, methods,
the case builder with its FLOP model call, tokens per call, the ``record_function`` labels its models add)
and its thin asv class; ``benchmarks.cases.AREAS`` lists them. Only the public API of ``transformer`` is used
here and in the area modules: asv runs this suite against old commits too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import record_function

from transformer import flops

from .grids import GRID_NAMES

try:  # asv's own skip marker, which also skips when raised in a benchmark's body
    from asv_runner.benchmarks.mark import SkipNotImplemented as _SkipBase
except ImportError:  # running outside asv
    _SkipBase = NotImplementedError

#: the methods a case may have: timed calls, and the depth area's recorded graph
KNOWN_METHODS = ("forward", "train_step", "generate", "graph")


class Skip(_SkipBase):
    """A case this machine cannot run (asv skips a benchmark whose setup raises NotImplementedError)."""


@contextlib.contextmanager
def using_threads(threads: int | None):
    """Run the block on ``threads`` CPU threads, then restore the count; None leaves torch's setting alone,
    uncalled: ``torch.set_num_threads`` called at all, even with the count torch already has, slows the
    process's small operators for the rest of its life (``scripts/regime_effects.py``, setting
    ``threads-set``), and a user's process never calls it unless they choose the threads."""
    if threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@dataclass
class Prepared:
    """A built case: callables to time (each synchronizes its device), its analytic FLOPs, the tokens
    one call processes, its device and dtype, and the CPU threads it runs on (None: torch's default)."""

    forward: Callable[[], Any]
    flops: flops.Flops
    tokens: int
    device: str = "cpu"
    dtype: str = "float32"
    train_step: Callable[[], Any] | None = None
    generate: Callable[[], Any] | None = None
    generate_flops: flops.Flops | None = None
    generate_tokens: int | None = None
    threads: int | None = None
    graph_only: bool = False  # a depth case: its one callable is recorded, not timed

    def work(self, method: str) -> tuple[Callable[[], Any], flops.Breakdown, int]:
        """The callable a method times, its FLOPs (forward, or forward + backward) and its tokens."""
        if method == "forward":
            return self.forward, self.flops.forward, self.tokens
        if method == "train_step" and self.train_step is not None:
            return self.train_step, self.flops.train, self.tokens
        if method == "generate" and self.generate is not None:
            return self.generate, self.generate_flops.forward, self.generate_tokens
        if method == "graph" and self.graph_only:
            return self.forward, self.flops.forward, self.tokens
        raise ValueError(f"this case has no method {method!r}; allowed: {', '.join(self.methods())}")

    def methods(self) -> list[str]:
        if self.graph_only:
            return ["graph"]
        return ["forward"] + [m for m in ("train_step", "generate") if getattr(self, m) is not None]


@dataclass(frozen=True)
class Area:
    """One benchmark area, defined once.

    name        the key records, the command line (``--area``) and the report use
    axes        grid name -> {axis: values}; a case is one combination (``keep`` may leave some out)
    build       (**params) -> Prepared: the models, inputs, callables and the FLOP model's count
    tokens      (params, method) -> tokens one call processes, from the parameters alone (asv's results
                have no record of it)
    methods     what each case times (``KNOWN_METHODS``)
    keep        grid name -> (params) -> whether a combination is one of the grid's cases
    keep_method grid name -> (params, method) -> whether the grid times that method of a case it has
    components  ``record_function`` label -> the paper's component, for labels this area's models add
    """

    name: str
    axes: Mapping[str, Mapping[str, list]]
    build: Callable[..., Prepared]
    tokens: Callable[[dict, str], int]
    methods: tuple[str, ...] = ("forward",)
    keep: Mapping[str, Callable[[dict], bool]] = field(default_factory=dict)
    keep_method: Mapping[str, Callable[[dict, str], bool]] = field(default_factory=dict)
    components: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not self.name.replace("-", "_").isidentifier():
            raise ValueError(f"area name {self.name!r} is not a simple name (letters, digits, _ or -)")
        if set(self.axes) != set(GRID_NAMES):
            raise ValueError(f"area {self.name!r} gives axes for grids {sorted(self.axes)}; give every grid: "
                             f"{', '.join(GRID_NAMES)}")
        unknown = set(self.methods) - set(KNOWN_METHODS)
        if not self.methods or unknown:
            raise ValueError(f"area {self.name!r}: methods {list(self.methods)}; allowed: {', '.join(KNOWN_METHODS)}")
        for grid, ax in self.axes.items():
            empty = [a for a, values in ax.items() if not values]
            if not ax or empty:
                raise ValueError(f"area {self.name!r}, grid {grid!r}: every axis needs values; empty: {empty or 'all'}")

    def on_grid(self, params: dict, grid: str) -> bool:
        keep = self.keep.get(grid)
        return keep is None or keep(params)

    def method_on_grid(self, params: dict, method: str, grid: str) -> bool:
        keep = self.keep_method.get(grid)
        return keep is None or keep(params, method)


def on_device(name: str) -> torch.device:
    """The torch device of a case; Skip where this machine has no such device."""
    if name == "cuda" and not torch.cuda.is_available():
        raise Skip("no CUDA device on this machine")
    return torch.device(name)


def synchronized(fn: Callable[[], Any], device: torch.device) -> Callable[[], Any]:
    """``fn``, waiting for a GPU to finish its work before returning (a timer then sees all of it)."""
    if device.type != "cuda":
        return fn

    def run():
        out = fn()
        torch.cuda.synchronize(device)
        return out

    return run


def train_step(module: torch.nn.Module, call: Callable[[], torch.Tensor]) -> Callable[[], None]:
    """One training step of ``module``: zero the gradients, the forward ``call``, a sum as the loss, backward."""
    def step():
        module.zero_grad(set_to_none=True)
        out = call()
        with record_function("loss"):
            loss = out.float().sum()
        with record_function("backward"):
            loss.backward()

    return step
