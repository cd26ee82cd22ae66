"""Predict a call's time from a machine's constants and the operators it executes, before measuring it.

For each operator of the executed graph (``opgraph``: its matmul FLOPs and the bytes it reads and writes),

    time = max(FLOPs / GEMM rate at that size, bytes / bandwidth) + the per-operator overhead

summed over the operators ("Making Deep Learning Go Brrrr": compute, memory and overhead). The term that
adds most names the call's bound. The constants come from micro-benchmarks (``constants.measure``) or from
a datasheet (peak FLOP/s, bandwidth, overhead), never from the cases being predicted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

#: the fields a datasheet must give, each a positive number
DATASHEET_FIELDS = ("peak_flops_per_s", "bandwidth_bytes_per_s", "op_overhead_s")
BOUNDS = ("compute", "memory", "overhead")


@dataclass
class Constants:
    """What the model knows of a machine: the GEMM rate against FLOPs per call (``gemm``: pairs sorted by
    FLOPs; one pair: the same rate at every size), the bandwidth and the per-operator overhead."""

    gemm: list[tuple[float, float]]
    bandwidth: float
    overhead: float
    source: str

    @classmethod
    def measured(cls, c: dict) -> Constants:
        """From ``constants.measure``'s dict: the GEMM rate by size, the better of copy and triad."""
        gemm = sorted((g["flops"], g["flops_per_s"]) for g in c["gemm"])
        return cls(gemm, max(c["copy_bytes_per_s"], c["triad_bytes_per_s"]), c["op_overhead_s"],
                   f"measured on {c.get('device', '?')} ({c.get('threads', '?')} threads)")

    @classmethod
    def datasheet(cls, sheet: dict, name: str = "datasheet") -> Constants:
        """From a datasheet's figures (DATASHEET_FIELDS); a missing or non-positive one is a ValueError naming it."""
        for field in DATASHEET_FIELDS:
            value = sheet.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name}: {field} is {value!r}; give a positive number "
                                 f"(every one of {', '.join(DATASHEET_FIELDS)} is needed)")
        return cls([(1.0, float(sheet["peak_flops_per_s"]))], float(sheet["bandwidth_bytes_per_s"]),
                   float(sheet["op_overhead_s"]), f"predicted from {name}, not measured")

    def gemm_rate(self, flops: float) -> float:
        """FLOP/s of a GEMM of ``flops``: interpolated in log-log between the measured sizes, the nearest
        measured rate beyond them."""
        sizes, rates = zip(*self.gemm)
        return float(np.exp(np.interp(math.log(flops), np.log(sizes), np.log(rates))))


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
        terms = dict(zip(BOUNDS, (self.compute_s, self.memory_s, self.overhead_s)))
        return max(terms, key=terms.get)


def predict(ops: Iterable, constants: Constants) -> Prediction:
    """The time of a call that executes ``ops`` (anything with ``flops`` and ``bytes``: ``opgraph.Op``)."""
    compute = memory = overhead = 0.0
    for op in ops:
        flop_s = op.flops / constants.gemm_rate(op.flops) if op.flops else 0.0
        byte_s = op.bytes / constants.bandwidth
        if flop_s >= byte_s:
            compute += flop_s
        else:
            memory += byte_s
        overhead += constants.overhead
    return Prediction(compute + memory + overhead, compute, memory, overhead)
