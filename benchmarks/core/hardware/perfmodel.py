"""Predict a call's time from a machine's constants and the operators it executes, before measuring it.

For each operator of the executed graph (``opgraph``: its FLOPs, the bytes it reads and writes, and for a
matrix product or fused attention kernel its shape),

    time = max(FLOPs / the kernel's rate at that shape (a pointwise operator: bytes written / its rate;
                   a matrix product whose weight comes from beyond the cache: the cold product's rate),
               bytes / bandwidth at that footprint, bytes read from beyond the cache / the bandwidth)
           + the page faults of writing a fresh tensor of its output's size + the dispatch overhead

summed over the operators, plus the overhead of the views, ``record_function`` scopes and module calls the
call made ("Making Deep Learning Go Brrrr": compute, memory and overhead). The term that adds most names the
call's bound. The constants come from micro-benchmarks (``constants.measure``) or from a datasheet (peak
FLOP/s, bandwidth, overhead), never from the cases being predicted.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

#: the fields a datasheet must give, each a positive number
DATASHEET_FIELDS = ("peak_flops_per_s", "bandwidth_bytes_per_s", "op_overhead_s")
#: the dispatch overheads a datasheet may also give (seconds; host-side costs of the framework)
OPTIONAL_OVERHEADS = {"view": "view_overhead_s", "scope": "scope_overhead_s", "module": "module_overhead_s",
                      "line": "line_overhead_s", "node": "node_overhead_s"}
BOUNDS = ("compute", "memory", "overhead")
#: the kernel whose rate prices an operator with FLOPs, by aten name (others: the matrix product's best rate)
KERNEL_OF = {"mm": "gemm", "addmm": "gemm", "bmm": "gemm", "baddbmm": "gemm",
             "_scaled_dot_product_flash_attention_for_cpu": "attention",
             "_scaled_dot_product_flash_attention": "attention",
             "_scaled_dot_product_efficient_attention": "attention",
             "_scaled_dot_product_cudnn_attention": "attention",
             "_scaled_dot_product_flash_attention_for_cpu_backward": "attention_backward",
             "_scaled_dot_product_flash_attention_backward": "attention_backward",
             "_scaled_dot_product_efficient_attention_backward": "attention_backward",
             "_scaled_dot_product_cudnn_attention_backward": "attention_backward"}

#: the operators priced at a measured pointwise rate (``constants.POINTWISE``: bytes written per second) where
#: it is slower than their memory traffic, by aten name
POINTWISE_OF = {"tanh": "tanh", "tanh_": "tanh", "sigmoid": "sigmoid", "sigmoid_": "sigmoid", "exp": "exp",
                "exp_": "exp", "gelu": "gelu", "_softmax": "softmax", "_log_softmax": "log_softmax",
                "native_layer_norm": "layer_norm"}


def _base(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def kernel_of(name: str) -> str | None:
    """The kernel an aten operator name (``aten.mm.default``) runs, or None."""
    return KERNEL_OF.get(_base(name))


@dataclass
class Grid:
    """A kernel's FLOP/s over a rectilinear grid of shapes, interpolated multilinearly in log space (log
    rate against log size on every axis), held at the edge value beyond the grid."""

    axes: dict[str, list[int]]
    rates: np.ndarray  # shape: one length per axis

    @classmethod
    def from_json(cls, d: dict) -> Grid:
        """From ``constants.kernel_rates``: axes as [name, values] pairs in the rates' order (a dict is read in
        its own order)."""
        axes = dict(d["axes"]) if isinstance(d["axes"], list) else d["axes"]
        shape = [len(v) for v in axes.values()]
        return cls({k: list(v) for k, v in axes.items()}, np.asarray(d["flops_per_s"], float).reshape(shape))

    @classmethod
    def constant(cls, rate: float, dims: int = 4) -> Grid:
        return cls({f"axis{i}": [1] for i in range(dims)}, np.full([1] * dims, float(rate)))

    @property
    def best(self) -> float:
        return float(self.rates.max())

    def rate(self, dims: tuple[int, ...]) -> float:
        """FLOP/s at ``dims`` (one size per axis)."""
        corners = []
        for x, values in zip(dims, self.axes.values(), strict=True):
            logs = np.log(values)
            lx = min(max(math.log(max(x, 1)), logs[0]), logs[-1])
            i = int(np.clip(np.searchsorted(logs, lx) - 1, 0, max(len(values) - 2, 0)))
            if len(values) == 1 or logs[i + 1] == logs[i]:  # one value (or one repeated): no slope
                corners.append(((i, 1.0),))
                continue
            w = (lx - logs[i]) / (logs[i + 1] - logs[i])
            corners.append(((i, 1 - w), (i + 1, w)))
        log_rate = 0.0
        for combo in itertools.product(*corners):
            weight = math.prod(w for _, w in combo)
            if weight:
                log_rate += weight * math.log(self.rates[tuple(i for i, _ in combo)])
        return math.exp(log_rate)


@dataclass
class Constants:
    """What the model knows of a machine: each kernel's rate by shape (``kernels``), the bandwidth and the
    seconds each kind of dispatch costs (``overhead``: op, view, scope, module)."""

    kernels: dict[str, Grid]
    bandwidth: float
    overhead: dict[str, float]
    source: str
    notes: list[str] = field(default_factory=list)
    #: a copy's rate and a fresh tensor's write rate by size (``constants.memory_rates``); None: the
    #: bandwidth at every size and no cost for fresh pages
    memory: dict | None = None
    #: the pointwise operators' rates by size written (``constants.pointwise_rates``); None: their memory
    #: traffic alone prices them
    pointwise: dict | None = None
    #: the control GEMM's rate while the constants were timed (``constants.measure``); None: not measured
    control_flops_per_s: float | None = None

    @classmethod
    def measured(cls, c: dict) -> Constants:
        """From ``constants.measure``'s dict: the kernels' rates, the better of copy and triad, the memory
        rates by size, and the host costs its workload shows (``host_overheads``)."""
        made = cls({kind: Grid.from_json(g) for kind, g in c["kernels"].items()},
                   max(c["copy_bytes_per_s"], c["triad_bytes_per_s"]), dict(c["overhead_s"]),
                   f"measured on {c.get('device', '?')} ({c.get('threads', '?')} threads"
                   f"{', coarse grid' if c.get('quick') else ''})", memory=c.get("memory"),
                   pointwise=c.get("pointwise"), control_flops_per_s=c.get("control_flops_per_s"))
        if c.get("host"):
            made.overhead.update(made.host_overheads(c["host"]))
        return made

    def host_overheads(self, host: dict) -> dict[str, float]:
        """What a Python line and a backward node cost (seconds) beyond everything else these constants price:
        the host workload's forward time less its priced operators and dispatches, per line it ran; then its
        training step's time less all that and its lines, per backward node (``host_side.host``)."""
        self.overhead.update(line=0.0, node=0.0)
        fwd, train = host["forward"], host["train"]
        self.overhead["line"] = self._rest(fwd) / fwd["lines"] if fwd["lines"] else 0.0
        nodes = train["dispatches"].get("node", 0)
        self.overhead["node"] = self._rest(train) / nodes if nodes else 0.0
        return {kind: self.overhead[kind] for kind in ("line", "node")}

    def _by_size(self, key: str, size: float) -> float:
        return _log_interp(self.memory["bytes"], self.memory[key], size)

    def pointwise_s(self, name: str, written: float) -> float:
        """Seconds a pointwise operator (``POINTWISE_OF``) writing ``written`` bytes takes at its measured rate
        (0 where the rate was not measured)."""
        kind = POINTWISE_OF.get(_base(name))
        p = self.pointwise
        if not kind or not p or kind not in p["written_bytes_per_s"] or not written:
            return 0.0
        return written / _log_interp(p["bytes"], p["written_bytes_per_s"][kind], written)

    def bandwidth_at(self, footprint: float) -> float:
        """Bytes per second an operator reading and writing ``footprint`` bytes sees: a copy's rate at that
        size (in cache above the STREAM figure, beyond the caches at it)."""
        return self._by_size("copy_bytes_per_s", footprint) if self.memory else self.bandwidth

    def fresh_pages_s(self, written: float) -> float:
        """Seconds writing ``written`` bytes into a newly allocated tensor costs beyond writing them into
        memory in use (the first-touch page faults where the allocator hands out new pages)."""
        if not self.memory or not written:
            return 0.0
        return max(0.0, written / self._by_size("fresh_bytes_per_s", written)
                   - written / self._by_size("copy_bytes_per_s", written))

    @classmethod
    def datasheet(cls, sheet: dict, name: str = "datasheet", dtype: str = "float32") -> Constants:
        """From a datasheet's figures (DATASHEET_FIELDS, and any of OPTIONAL_OVERHEADS); a missing or
        non-positive one is a ValueError naming it. ``peak_flops_per_s`` is one number or one per dtype
        (``{"float32": ..., "bfloat16": ...}``: the one of ``dtype`` is used). Every kernel runs at the peak."""
        peaks = sheet.get("peak_flops_per_s")
        if isinstance(peaks, dict):
            if dtype not in peaks:
                raise ValueError(f"{name}: peak_flops_per_s has no {dtype!r}; it gives {', '.join(map(repr, peaks))}")
            _positive(peaks, dtype, f"{name}: peak_flops_per_s", required=True)
            sheet = {**sheet, "peak_flops_per_s": peaks[dtype]}
        for f in DATASHEET_FIELDS:
            _positive(sheet, f, name, required=True)
        overhead = {"op": float(sheet["op_overhead_s"])}
        notes = []
        for kind, f in OPTIONAL_OVERHEADS.items():
            if f in sheet:
                overhead[kind] = _positive(sheet, f, name)
            else:
                overhead[kind] = 0.0
                notes.append(f"{f} not given: {kind}s cost nothing there")
        peak = float(sheet["peak_flops_per_s"])
        return cls({"gemm": Grid.constant(peak)}, float(sheet["bandwidth_bytes_per_s"]), overhead,
                   f"predicted from {name}, not measured", notes)

    def _rest(self, run: dict) -> float:
        """Seconds of a host workload's ``run`` that these constants do not price (none if they price more)."""
        priced = predict([Priced(**op) for op in run["ops"]], self, {**run["dispatches"], "line": run["lines"]})
        return max(0.0, run["seconds"] - priced.time_s)

    def cold_gemm(self, dims: tuple[int, ...]) -> bool:
        """Whether a matrix product of ``dims`` (batch, m, n, k) whose weight is not in the cache is priced at
        the cold products' rate: one was measured and its m is within that grid (a wider product hides
        where its weight comes from)."""
        grid = self.kernels.get("gemm_cold")
        return grid is not None and len(dims) == 4 and dims[1] <= max(grid.axes["m"])

    def rate(self, kernel: str | None, dims: tuple[int, ...]) -> float:
        """FLOP/s of ``kernel`` at ``dims``; a kernel not measured (or an operator with FLOPs but no
        kernel) at the matrix product's best rate."""
        grid = self.kernels.get(kernel) if kernel else None
        if grid is None or not dims:
            return self.kernels["gemm"].best
        return grid.rate(dims)


def _log_interp(sizes: list[float], rates: list[float], size: float) -> float:
    """The rate at ``size``, interpolated in log-log between measured sizes, held at the edges."""
    return float(np.exp(np.interp(math.log(max(size, 1)), np.log(sizes), np.log(rates))))


def _positive(sheet: dict, f: str, name: str, required: bool = False) -> float:
    value = sheet.get(f)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        need = f"every one of {', '.join(DATASHEET_FIELDS)} is needed" if required else "or leave it out"
        raise ValueError(f"{name}: {f} is {value!r}; give a positive number ({need})")
    return float(value)


@dataclass
class Priced:
    """One row of what a call executes (``opgraph.OpGraph.summary``): an operator, its FLOPs, the bytes it
    reads and writes, its kernel shape and how many times it ran."""

    name: str
    flops: int
    bytes: int
    shape: tuple[int, ...] = ()
    written: int = 0
    count: int = 1
    #: bytes it read from beyond the last-level cache (``opgraph.OpGraph.mark_cold``)
    cold: int = 0


@dataclass
class Prediction:
    """A call's predicted time and its three terms (seconds: compute where it beat memory, memory where it
    beat compute, overhead), and the bound: the largest term."""

    time_s: float
    compute_s: float
    memory_s: float
    overhead_s: float

    @property
    def bound(self) -> str:
        terms = dict(zip(BOUNDS, (self.compute_s, self.memory_s, self.overhead_s), strict=True))
        return max(terms, key=terms.get)


def predict(ops: Iterable, constants: Constants, dispatches: dict[str, int] | None = None) -> Prediction:
    """The time of a call that executes ``ops`` (each with ``name``, ``flops``, ``bytes``, ``shape`` and
    ``count``, as ``opgraph.Op`` or the rows of ``opgraph.OpGraph.summary``) and makes ``dispatches``
    other dispatches (views, scopes, modules: counts)."""
    compute = memory = overhead = 0.0
    for op in ops:
        count = getattr(op, "count", 1)
        cold = getattr(op, "cold", 0)
        kernel = kernel_of(op.name)
        if kernel == "gemm" and cold and constants.cold_gemm(tuple(op.shape)):
            kernel = "gemm_cold"
        flop_s = op.flops / constants.rate(kernel, tuple(op.shape)) if op.flops else 0.0
        flop_s = max(flop_s, constants.pointwise_s(op.name, getattr(op, "written", 0)))
        byte_s = max(op.bytes / constants.bandwidth_at(op.bytes), cold / constants.bandwidth)
        if flop_s >= byte_s:
            compute += count * flop_s
        else:
            memory += count * byte_s
        memory += count * constants.fresh_pages_s(getattr(op, "written", 0))
        overhead += count * constants.overhead["op"]
    for kind, n in (dispatches or {}).items():
        overhead += n * constants.overhead.get(kind, 0.0)
    return Prediction(compute + memory + overhead, compute, memory, overhead)
