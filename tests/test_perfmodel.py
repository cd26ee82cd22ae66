"""The performance model (benchmarks.core.hardware.perfmodel) on synthetic operator lists with known answers, the
machine constants' micro-benchmarks (benchmarks.core.hardware.constants), the shapes and dispatches the executed
graph records for it (benchmarks.core.opgraph), and datasheets with bad fields."""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from benchmarks import cases
from benchmarks.core import opgraph
from benchmarks.core.hardware import constants, host_side, perfmodel
from benchmarks.core.hardware.perfmodel import Priced

SHEET = {"peak_flops_per_s": 1e11, "bandwidth_bytes_per_s": 1e10, "op_overhead_s": 1e-6}


def test_a_list_of_gemms_is_compute_bound_at_the_gemm_rate():
    c = perfmodel.Constants.datasheet(SHEET)
    gemm = Priced("aten.mm.default", 2 * 1024**3, 3 * 4 * 1024**2, (1, 1024, 1024, 1024), count=10)
    p = perfmodel.predict([gemm], c)
    assert p.bound == "compute" and p.memory_s == 0
    assert p.time_s == pytest.approx(10 * 2 * 1024**3 / 1e11 + 10 * 1e-6)


def test_a_list_of_copies_is_memory_bound_at_the_bandwidth():
    p = perfmodel.predict([Priced("aten.copy_.default", 0, 8 * 2**26)] * 4, perfmodel.Constants.datasheet(SHEET))
    assert p.bound == "memory" and p.compute_s == 0
    assert p.time_s == pytest.approx(4 * 8 * 2**26 / 1e10 + 4e-6)


def test_many_tiny_operators_are_overhead_bound_and_every_dispatch_kind_is_priced():
    sheet = {**SHEET, "view_overhead_s": 2e-6, "scope_overhead_s": 3e-6, "module_overhead_s": 4e-6}
    c = perfmodel.Constants.datasheet(sheet)
    p = perfmodel.predict([Priced("aten.add.Tensor", 0, 8, count=1000)], c, {"view": 10, "scope": 20, "module": 30})
    assert p.bound == "overhead"
    assert p.overhead_s == pytest.approx(1000 * 1e-6 + 10 * 2e-6 + 20 * 3e-6 + 30 * 4e-6)
    assert p.time_s == pytest.approx(p.overhead_s + 1000 * 8 / 1e10)


def test_a_datasheet_without_host_overheads_prices_them_at_nothing_and_says_so():
    c = perfmodel.Constants.datasheet(SHEET, "h100.json")
    assert c.overhead["view"] == c.overhead["scope"] == c.overhead["module"] == 0
    assert len(c.notes) == len(perfmodel.OPTIONAL_OVERHEADS) and "predicted from h100.json, not measured" == c.source


def test_the_rate_is_interpolated_in_log_space_between_grid_points_and_held_beyond_them():
    g = perfmodel.Grid({"m": [16, 1024], "k": [16, 1024]}, np.array([[1e9, 4e9], [16e9, 64e9]]))
    assert g.rate((16, 16)) == pytest.approx(1e9) and g.rate((1024, 1024)) == pytest.approx(64e9)
    assert g.rate((128, 16)) == pytest.approx(4e9)  # halfway in log m: the geometric mean of 1 and 16
    assert g.rate((128, 128)) == pytest.approx(math.sqrt(1e9 * 64e9))
    assert g.rate((1, 1)) == pytest.approx(1e9) and g.rate((10**6, 10**6)) == pytest.approx(64e9)
    assert perfmodel.Grid({"m": [4, 4]}, np.array([2e9, 2e9])).rate((16,)) == pytest.approx(2e9)  # no slope


def test_each_kernel_is_priced_at_its_own_grid():
    slow, fast = perfmodel.Grid.constant(1e9), perfmodel.Grid.constant(1e11)
    c = perfmodel.Constants({"gemm": fast, "attention": slow}, 1e12, {"op": 0.0}, "test")
    mm = Priced("aten.mm.default", 10**9, 0, (1, 1000, 1000, 500))
    sdpa = Priced("aten._scaled_dot_product_flash_attention_for_cpu.default", 10**9, 0, (8, 100, 100, 64))
    other = Priced("aten.convolution.default", 10**9, 0)  # FLOPs but no measured kernel: the GEMM's best rate
    assert perfmodel.predict([mm], c).time_s == pytest.approx(1e-2)
    assert perfmodel.predict([sdpa], c).time_s == pytest.approx(1.0)
    assert perfmodel.predict([other], c).time_s == pytest.approx(1e-2)


def test_a_line_and_a_backward_node_cost_what_the_host_workload_shows_beyond_everything_else_priced():
    c = perfmodel.Constants({"gemm": perfmodel.Grid.constant(1e11)}, 1e10, {"op": 1e-6, "view": 5e-7}, "test")
    ops = [{"name": "aten.mm.default", "flops": 10**6, "bytes": 0, "shape": [1, 10, 10, 10], "written": 0,
            "count": 20}]
    priced = 20 * (1e-5 + 1e-6) + 30 * 5e-7
    host = {"forward": {"seconds": priced + 400 * 1e-7, "lines": 400, "ops": ops, "dispatches": {"view": 30}},
            "train": {"seconds": priced + 900 * 1e-7 + 50 * 2e-6, "lines": 900, "ops": ops,
                      "dispatches": {"view": 30, "node": 50}}}
    assert c.host_overheads(host) == pytest.approx({"line": 1e-7, "node": 2e-6})
    assert c.overhead["line"] == pytest.approx(1e-7) and c.overhead["node"] == pytest.approx(2e-6)
    quicker = {**host, "forward": {**host["forward"], "seconds": priced / 2}}  # faster than priced: no line cost
    assert c.host_overheads(quicker)["line"] == 0


def test_the_graph_counts_the_backward_nodes_and_the_python_lines_a_call_runs():
    x = torch.ones(3, requires_grad=True)
    assert opgraph.record(lambda: (x * 2).sin().sum()).dispatches["node"] == 0  # forward only
    assert opgraph.record(lambda: (x * 2).sin().sum().backward()).dispatches["node"] >= 3  # sum, sin, mul

    def three_lines():
        a = 1
        b = 2
        return a + b

    assert opgraph.record(three_lines, lines=True).dispatches["line"] == 3


def _plain_lines(fn) -> int:
    """The Python lines ``fn()`` runs, counted by a bare tracer, with no dispatch mode."""
    count = [0]

    def local(frame, event, arg):
        count[0] += event == "line"
        return local

    sys.settrace(lambda frame, event, arg: local)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count[0]


@pytest.mark.parametrize("area,params,method", [
    ("layers", {"layer": "recurrent", "seq_len": 16, "d_model": 32, "device": "cpu"}, "forward"),
    ("models", {"model": "transformer", "preset": "tiny", "seq_len": 8, "batch": 2, "device": "cpu"}, "train_step"),
    ("models", {"model": "rnn-width", "preset": "tiny", "seq_len": 8, "batch": 2, "device": "cpu"}, "generate"),
])
def test_the_lines_counted_under_the_recorder_are_the_calls_own(area, params, method):
    """One recorded call counts the lines and module calls of a plain call: none of the dispatch mode's own
    (torch runs Python for every operator under a mode: thousands of lines in a GRU's loop)."""
    fn = cases.build(area, params).work(method)[0]
    fn()
    counted = opgraph.record(fn, lines=True).dispatches
    assert counted["line"] == _plain_lines(fn) > 0
    assert counted["module"] == opgraph.record(fn).dispatches["module"]


def test_a_thin_product_whose_weight_is_not_in_the_cache_is_priced_at_the_cold_rate():
    cold = perfmodel.Grid({"batch": [1], "m": [1, 128], "n": [1], "k": [1]}, np.full((1, 2, 1, 1), 1e10))
    c = perfmodel.Constants({"gemm": perfmodel.Grid.constant(1e11), "gemm_cold": cold}, 1e12, {"op": 0.0}, "test")
    thin, wide = (1, 8, 512, 512), (1, 1024, 512, 512)
    for dims, rate in ((thin, 1e10), (wide, 1e11)):  # a wide product hides where its weight comes from
        op = Priced("aten.mm.default", 10**9, 0, dims, cold=512 * 512 * 4)
        assert perfmodel.predict([op], c).time_s == pytest.approx(1e9 / rate)
        assert perfmodel.predict([replace(op, cold=0)], c).time_s == pytest.approx(1e-2)  # in cache: hot
    weights = Priced("aten.add.Tensor", 0, 10**6, cold=10**10)  # its cold bytes at the bandwidth
    assert perfmodel.predict([weights], c).time_s == pytest.approx(1e-2)


def test_a_transcendental_is_priced_at_its_measured_rate_where_that_is_slower_than_its_traffic():
    pointwise = {"bytes": [2**10, 2**20], "written_bytes_per_s": {"tanh": [1e8, 1e9]}}
    c = perfmodel.Constants({"gemm": perfmodel.Grid.constant(1e11)}, 1e10, {"op": 0.0}, "test", pointwise=pointwise)
    tanh = perfmodel.predict([Priced("aten.tanh.default", 0, 2**21, written=2**20)], c)
    assert tanh.bound == "compute" and tanh.time_s == pytest.approx(2**20 / 1e9)
    assert perfmodel.predict([Priced("aten.tanh_.default", 0, 2**11, written=2**10)], c).time_s == pytest.approx(
        2**10 / 1e8)
    add = perfmodel.predict([Priced("aten.add.Tensor", 0, 2**21, written=2**20)], c)  # no rate: its traffic
    assert add.bound == "memory" and add.time_s == pytest.approx(2**21 / 1e10)


def test_the_bytes_read_from_beyond_the_cache_are_a_large_models_weights_not_a_small_ones():
    x, weights = torch.randn(4, 256), [torch.randn(256, 256) for _ in range(8)]  # 256 KiB each

    def call():
        h = x
        for w in weights:
            h = h @ w

    g = opgraph.record(call)
    small = g.summary(cache_bytes=2**20)  # the 2 MiB of weights do not fit: each is read from memory
    assert sum(r["count"] for r in small if r["cold"] >= 256 * 256 * 4) == len(weights)
    assert all(r["cold"] == 0 for r in g.summary(cache_bytes=2**24))  # they fit: after the first call, none
    assert all(r["cold"] == 0 for r in g.summary())  # no cache size given: nothing marked


@pytest.mark.parametrize("field", perfmodel.DATASHEET_FIELDS)
@pytest.mark.parametrize("bad", [None, 0, -1.0, float("nan"), "fast", True])
def test_a_datasheet_with_a_missing_or_non_positive_field_is_named(field, bad):
    sheet = {**SHEET, field: bad} if bad is not None else {k: v for k, v in SHEET.items() if k != field}
    with pytest.raises(ValueError, match=f"h100.json: {field} is {bad!r}; give a positive number"):
        perfmodel.Constants.datasheet(sheet, "h100.json")


def test_a_datasheet_gives_its_peak_per_dtype_and_a_missing_dtype_is_named():
    sheet = {**SHEET, "peak_flops_per_s": {"float32": 6.7e13, "bfloat16": 9.89e14}}
    assert perfmodel.Constants.datasheet(sheet, "h200.json", "bfloat16").kernels["gemm"].best == 9.89e14
    with pytest.raises(ValueError, match="h200.json: peak_flops_per_s has no 'float16'; it gives 'float32', 'bf"):
        perfmodel.Constants.datasheet(sheet, "h200.json", "float16")
    with pytest.raises(ValueError, match="h200.json: peak_flops_per_s: float32 is -1; give a positive number"):
        perfmodel.Constants.datasheet({**SHEET, "peak_flops_per_s": {"float32": -1}}, "h200.json")
    with pytest.raises(ValueError, match="view_overhead_s is 0; give a positive number .or leave it out"):
        perfmodel.Constants.datasheet({**SHEET, "view_overhead_s": 0}, "h200.json")


def test_the_micro_benchmarks_give_positive_finite_figures():
    c = constants.measure("cpu", quick=True)
    rates = [r for k in c["kernels"].values() for r in k["flops_per_s"]]
    memory = c["memory"]["copy_bytes_per_s"] + c["memory"]["fresh_bytes_per_s"]
    pointwise = [r for rates in c["pointwise"]["written_bytes_per_s"].values() for r in rates]
    figures = rates + memory + pointwise + [c["copy_bytes_per_s"], c["triad_bytes_per_s"], *c["overhead_s"].values()]
    assert set(c["pointwise"]["written_bytes_per_s"]) == set(constants.POINTWISE) == set(
        perfmodel.POINTWISE_OF.values())
    assert isinstance(c["cache_bytes"], int) and c["cache_bytes"] >= 2**16  # Linux lists its CPU caches
    assert all(run["seconds"] > 0 and run["lines"] > 0 and run["ops"] for run in c["host"].values())
    assert c["host"]["train"]["dispatches"]["node"] > 0
    assert all(math.isfinite(x) and x > 0 for x in figures), c
    assert set(c["kernels"]) == set(constants.KERNELS) and set(c["overhead_s"]) == set(host_side.OVERHEADS)
    assert c["threads"] == torch.get_num_threads() and max(c["overhead_s"].values()) < 1e-3
    grid = perfmodel.Grid.from_json(c["kernels"]["gemm"])
    assert grid.rates.shape == (2, 2, 2, 2)
    # the control GEMM before each part of the calibration and after the last: the machine's speed through it
    parts = len(c["kernels"]) + 3 + 2 * host_side.MOMENTS  # the bandwidth, memory, pointwise; host and overheads
    assert len(c["controls"]) == parts + 1 and all(x > 0 for x in c["controls"])
    assert c["control_flops_per_s"] == statistics.median(c["controls"])
    assert perfmodel.Constants.measured(c).control_flops_per_s == c["control_flops_per_s"]


def test_the_host_side_constants_are_the_least_of_moments_spread_over_the_measurement(monkeypatch):
    from run_helpers import _MEASURE

    order, spell = [], iter([3.0, 1.0, 2.0])  # a busy spell over the first moment: 3x the time
    moment = {"op": None}

    def overheads(device, ops, run_time):
        moment["op"] = next(spell)
        order.append("host-side")
        return {"op": moment["op"] * 1e-6, "view": 1e-6}

    def host(device, run_time, cache=None, counted=None):
        if counted is None:
            order.append("counted")
        return {"forward": {"seconds": moment["op"] * 2e-4, "lines": 396}}

    monkeypatch.setattr(host_side, "overheads", overheads)
    monkeypatch.setattr(host_side, "host", host)
    for part in ("kernel_rates", "memory_rates", "pointwise_rates"):
        monkeypatch.setattr(constants, part, lambda *a, part=part, **k: order.append(part) or {})
    monkeypatch.setattr(constants, "bandwidth", lambda *a, **k: order.append("bandwidth") or {})
    c = _MEASURE("cpu", quick=True)
    assert c["overhead_s"] == {"op": 1e-6, "view": 1e-6} and c["host"]["forward"]["seconds"] == pytest.approx(2e-4)
    kernels = ["kernel_rates"] * len(constants.GRIDS["cpu"])
    assert order == ["host-side", "counted", *kernels, "host-side", "bandwidth", "memory_rates", "pointwise_rates",
                     "host-side"]  # before the kernels, after them and at the end; the host workload counted once
    assert host_side.MOMENTS == 3


def test_a_grid_keeps_its_axes_order_through_a_record_written_with_sorted_keys():
    c = constants.kernel_rates("gemm", grid={"batch": (1,), "m": (2, 64), "n": (3,), "k": (4, 256)},
                               block_time=1e-4)
    grid = perfmodel.Grid.from_json(json.loads(json.dumps(c, sort_keys=True)))
    assert list(grid.axes) == ["batch", "m", "n", "k"] and grid.rates.shape == (1, 2, 1, 2)
    # the rates in itertools.product order: (m, k) = (2, 4), (2, 256), (64, 4), (64, 256)
    assert grid.rate((1, 64, 3, 4)) == pytest.approx(c["flops_per_s"][2])


def test_a_grid_point_too_big_to_time_is_timed_smaller_batch_first():
    dims = constants._capped((256, 1024, 1024, 1024), constants.gemm_flops, constants.gemm_elements, "cpu")
    assert dims[0] == 1 and constants.gemm_flops(*dims) <= constants.FLOP_CAP["cpu"]
    assert constants.gemm_elements(*dims) <= constants.ELEMENT_CAP["cpu"]


def test_the_graph_records_each_kernel_shape_and_the_other_dispatches():
    a, b = torch.randn(5, 7), torch.randn(3, 7, 2)
    q = torch.randn(2, 3, 16, 8, requires_grad=True)
    layer = torch.nn.Linear(7, 4)

    def call():
        with torch.profiler.record_function("scope"):
            layer(a)
            torch.bmm(b.transpose(1, 2), b)
            torch.nn.functional.scaled_dot_product_attention(q, q, q).sum().backward()

    g = opgraph.record(call)
    shapes = {op.name.split(".")[1]: op.shape for op in g.ops if op.flops}
    assert shapes["addmm"] == (1, 5, 4, 7) and shapes["bmm"] == (3, 2, 2, 7)
    assert shapes["_scaled_dot_product_flash_attention_for_cpu"] == (6, 16, 16, 8)
    assert shapes["_scaled_dot_product_flash_attention_for_cpu_backward"] == (6, 16, 16, 8)
    assert g.dispatches["scope"] == 1 and g.dispatches["module"] == 1 and g.dispatches["view"] >= 2
    rows = g.summary()
    assert sum(r["count"] for r in rows) == g.launches and sum(r["flops"] * r["count"] for r in rows) == g.matmul_flops
    addmm = next(op for op in g.ops if op.name == "aten.addmm.default")
    assert addmm.written == 5 * 4 * 4 and addmm.bytes == addmm.written + (4 + 5 * 7 + 7 * 4) * 4


def test_an_embedding_lookup_reads_the_rows_it_gathers_not_the_whole_table():
    table, ids = torch.nn.Embedding(10_000, 16), torch.randint(0, 10_000, (4, 3))
    (op,) = opgraph.record(lambda: table(ids)).ops
    assert op.written == 4 * 3 * 16 * 4 and op.bytes == 2 * op.written + ids.numel() * 8


def test_a_real_call_is_predicted_from_its_executed_operators():
    case = cases.build("attention", {"seq_len": 128, "d_head": 64, "backend": "math", "causal": False,
                                     "dtype": "float32", "device": "cpu"})
    graph = opgraph.record(case.work("forward")[0])
    assert graph.matmul_flops > 0 and all(op.bytes > 0 for op in graph.ops)
    c = perfmodel.Constants.measured(constants.measure("cpu", quick=True))
    p = perfmodel.predict([Priced(**r) for r in graph.summary()], c, graph.dispatches)
    assert p.time_s > 0 and p.time_s == pytest.approx(p.compute_s + p.memory_s + p.overhead_s)
    assert p.time_s == pytest.approx(perfmodel.predict(graph.ops, c, graph.dispatches).time_s)


def test_a_fresh_tensor_costs_its_page_faults_and_memory_is_priced_at_its_footprint():
    memory = {"bytes": [2**20, 2**28], "copy_bytes_per_s": [1e11, 1e10], "fresh_bytes_per_s": [1e11, 1e9]}
    c = perfmodel.Constants({"gemm": perfmodel.Grid.constant(1e11)}, 1e10, {"op": 0.0}, "test", memory=memory)
    assert c.bandwidth_at(2**20) == pytest.approx(1e11) and c.bandwidth_at(2**40) == pytest.approx(1e10)
    assert c.fresh_pages_s(2**20) == 0  # in use as fast as fresh: nothing extra
    assert c.fresh_pages_s(2**28) == pytest.approx(2**28 / 1e9 - 2**28 / 1e10)
    p = perfmodel.predict([Priced("aten.softmax.default", 0, 2**29, written=2**28)], c)
    assert p.bound == "memory" and p.memory_s == pytest.approx(2**29 / 1e10 + 2**28 / 1e9 - 2**28 / 1e10)


def test_a_kernel_sample_makes_only_the_calls_it_times_after_its_warm_up():
    """``constants._samples``: WARM_CALLS warm-up calls, one that sizes the samples, then the samples' calls and
    no others (``Timer.timeit`` would add two warm-up calls before each sample: most of a slow point's calls)."""
    calls = [0]

    def stmt():
        calls[0] += 1
        time.sleep(0.002)

    seconds = constants._samples(stmt, 0.001, 3)
    assert calls[0] == constants.WARM_CALLS + 1 + 3  # a 2 ms call is one call a sample of 1 ms
    assert all(0.002 <= s < 0.05 for s in seconds) and seconds == sorted(seconds)


def test_the_kernels_operands_are_distinct_aligned_regions_of_one_normal_draw():
    normal = constants._Normal("cpu", torch.float32, 1000)
    a, b = normal(3, 5), normal(7, requires_grad=True)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # one buffer, drawn once
    assert b.data_ptr() - a.data_ptr() == 16 * 4 and a.data_ptr() % 64 == 0  # the next 64-byte boundary
    assert b.requires_grad and b.is_leaf and not a.requires_grad
    assert normal(990).data_ptr() == a.data_ptr()  # what no longer fits starts the buffer again
    assert normal(2000).shape == (2000,) and abs(float(normal.buffer.std()) - 1) < 0.15
