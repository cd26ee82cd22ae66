"""The performance model (benchmarks.core.perfmodel) on synthetic operator lists with known answers, the
machine constants' micro-benchmarks (benchmarks.core.constants), and datasheets with bad fields."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from benchmarks import cases
from benchmarks.core import constants, opgraph, perfmodel

SHEET = {"peak_flops_per_s": 1e11, "bandwidth_bytes_per_s": 1e10, "op_overhead_s": 1e-6}


@dataclass
class FakeOp:
    flops: int
    bytes: int


def test_a_list_of_gemms_is_compute_bound_at_the_gemm_rate():
    c = perfmodel.Constants.datasheet(SHEET)
    p = perfmodel.predict([FakeOp(2 * 1024**3, 3 * 4 * 1024**2)] * 10, c)
    assert p.bound == "compute" and p.memory_s == 0
    assert p.time_s == pytest.approx(10 * 2 * 1024**3 / 1e11 + 10 * 1e-6)


def test_a_list_of_copies_is_memory_bound_at_the_bandwidth():
    p = perfmodel.predict([FakeOp(0, 8 * 2**26)] * 4, perfmodel.Constants.datasheet(SHEET))
    assert p.bound == "memory" and p.compute_s == 0
    assert p.time_s == pytest.approx(4 * 8 * 2**26 / 1e10 + 4e-6)


def test_many_tiny_operators_are_overhead_bound():
    p = perfmodel.predict([FakeOp(0, 8)] * 1000, perfmodel.Constants.datasheet(SHEET))
    assert p.bound == "overhead" and p.overhead_s == pytest.approx(1e-3)
    assert p.time_s == pytest.approx(1e-3 + 1000 * 8 / 1e10)


def test_the_gemm_rate_is_interpolated_between_measured_sizes_and_held_beyond_them():
    c = perfmodel.Constants([(1e6, 1e10), (1e9, 1e11)], 1e10, 1e-6, "test")
    assert c.gemm_rate(math.sqrt(1e6 * 1e9)) == pytest.approx(math.sqrt(1e10 * 1e11))
    assert c.gemm_rate(10) == pytest.approx(1e10) and c.gemm_rate(1e12) == pytest.approx(1e11)


@pytest.mark.parametrize("field", perfmodel.DATASHEET_FIELDS)
@pytest.mark.parametrize("bad", [None, 0, -1.0, float("nan"), "fast", True])
def test_a_datasheet_with_a_missing_or_non_positive_field_is_named(field, bad):
    sheet = {**SHEET, field: bad} if bad is not None else {k: v for k, v in SHEET.items() if k != field}
    with pytest.raises(ValueError, match=f"h100.json: {field} is {bad!r}; give a positive number"):
        perfmodel.Constants.datasheet(sheet, "h100.json")


def test_the_micro_benchmarks_give_positive_finite_figures():
    c = constants.measure("cpu", quick=True)
    figures = [g["flops_per_s"] for g in c["gemm"]] + [c["copy_bytes_per_s"], c["triad_bytes_per_s"],
                                                        c["op_overhead_s"]]
    assert all(math.isfinite(x) and x > 0 for x in figures), c
    assert c["threads"] == torch.get_num_threads() and c["op_overhead_s"] < 1e-3


def test_a_real_call_is_predicted_from_its_executed_operators():
    case = cases.build("attention", {"seq_len": 128, "d_head": 64, "backend": "math", "causal": False,
                                     "dtype": "float32", "device": "cpu"})
    graph = opgraph.record(case.work("forward")[0])
    assert graph.matmul_flops > 0 and all(op.bytes > 0 for op in graph.ops)
    p = perfmodel.predict(graph.ops, perfmodel.Constants.measured(constants.measure("cpu", quick=True)))
    assert p.time_s > 0 and p.time_s == pytest.approx(p.compute_s + p.memory_s + p.overhead_s)
