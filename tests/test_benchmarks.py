"""Every asv benchmark's setup and body run once on the quick grid's CPU cases; FLOP tracks are counted."""

import importlib
import inspect
import pkgutil
import time

import pytest
import torch

import benchmarks
from benchmarks import cases
from benchmarks.core.hardware import machine
from benchmarks.core.ranks import head_parallel
from benchmarks.core.timing import measure
from transformer import flops

MODULES = [importlib.import_module(f"benchmarks.{m.name}") for m in pkgutil.iter_modules(benchmarks.__path__)
           if m.name.startswith("bench_")]
ALL_CLASSES = [c for m in MODULES for n, c in vars(m).items() if inspect.isclass(c) and not n.startswith("_")
               and c.__module__ == m.__name__ and hasattr(c, "area")]
# the head-parallel benchmark spawns its own ranks (tests/test_parallel.py); the rest are cases.GRIDS areas
CLASSES = [c for c in ALL_CLASSES if c.area != head_parallel.AREA]
GPU_TRACKS = ("track_gpu_", "track_energy_")
CLASS_BY_AREA = {c.area: c for c in CLASSES}
GRAPH_AREAS = {a for a, methods in cases.METHODS.items() if methods == ("graph",)}
CASE_CLASSES = [c for c in CLASSES if c.area not in GRAPH_AREAS]
PREFIXES = ("time_", "peakmem_", "track_")


def cpu_params(cls):
    if "device" not in cases.axes(cls.area, "quick"):
        return cases.combinations(cls.area, "quick")
    return cases.select(cls.area, "quick", device="cpu")


@pytest.fixture(scope="module")
def peaks():
    """What asv's setup_cache hands every method: this machine's GEMM peaks (calibrated on a small GEMM: the
    calibration itself is bench_calibration's and test_machine's)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(machine, "GEMM_SIZES", {**machine.GEMM_SIZES, "cpu": (256,)})
        return CASE_CLASSES[0]().setup_cache()


def test_every_module_has_a_benchmark_class_per_area():
    assert {c.area for c in CLASSES} == set(cases.GRIDS["quick"])
    parallel = [c for c in ALL_CLASSES if c.area == head_parallel.AREA]
    assert len(parallel) == 1 and set(parallel[0].param_names) == set(cases.PARALLEL_GRIDS["quick"]) | {
        "ranks", "backend", "device"}
    for cls in CLASSES:
        assert cls.param_names == list(cases.axes(cls.area))


def one_call(fn, min_run_time):
    """A timing of one call, for the test that runs every body once (the timing itself: test_runner)."""
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    return measure.Timing(seconds, seconds, seconds, 1, 1)


@pytest.mark.parametrize("cls", CASE_CLASSES, ids=lambda c: c.__name__)
def test_setup_and_every_benchmark_body_run(cls, peaks, monkeypatch):
    monkeypatch.setattr(measure, "blocked_timing", one_call)
    # the same bodies on fewer tokens: what runs is checked here, not what the grid's shapes cost
    monkeypatch.setitem(cases.MULTIHEAD_SHAPE, "seq_len", 32)
    monkeypatch.setitem(cases.TOKENS, "cpu", 1024)
    params, names = cpu_params(cls), cls.param_names
    methods = [n for n in dir(cls) if n.startswith(PREFIXES)]
    assert {"time_forward", "track_matmul_flops", "track_achieved_flops_per_s", "track_fraction_of_peak",
            "track_gpu_peak_memory_bytes", "track_energy_per_token_j"} <= set(methods)
    for p in params:
        bench = cls()
        bench.min_run_time = 0.01
        values = [p[n] for n in names]
        bench.setup(peaks, *values)
        for name in methods:
            if name.startswith(GPU_TRACKS):  # CPU case: asv records these as skipped
                with pytest.raises(cases.Skip, match="CUDA"):
                    getattr(bench, name)(peaks, *values)
                continue
            result = getattr(bench, name)(peaks, *values)
            if name == "track_matmul_flops":
                assert isinstance(result, int) and result > 0
            elif name.startswith("track_"):
                assert result > 0


def test_achieved_flops_and_fraction_of_peak_divide_the_right_numbers(peaks, monkeypatch):
    from benchmarks.core.timing import measure

    bench = CLASS_BY_AREA["threads"]()
    values = [{"workload": "multihead", "threads": 1}[n] for n in bench.param_names]
    bench.setup(peaks, *values)
    flops_ = bench.case.flops.forward.matmul_total
    slow = 4 * flops_ / peaks["cpu/float32/1"]  # a time at a quarter of the peak
    monkeypatch.setattr(measure, "blocked_timing", lambda fn, min_run_time: measure.Timing(slow, slow, slow, 5, 1))
    assert bench.track_achieved_flops_per_s(peaks, *values) == flops_ / slow
    assert bench.track_fraction_of_peak(peaks, *values) == pytest.approx(flops_ / slow / peaks["cpu/float32/1"])
    fast = flops_ / peaks["cpu/float32/1"] / 1.5  # faster than the peak: the peak read low, the fraction is 1
    monkeypatch.setattr(measure, "blocked_timing", lambda fn, min_run_time: measure.Timing(fast, fast, fast, 5, 1))
    assert bench.track_fraction_of_peak(peaks, *values) == 1.0


def test_setup_cache_calibrates_every_thread_count_and_the_default(peaks):
    threads = cases.axes("threads", "quick")["threads"]
    assert set(peaks) == {f"cpu/float32/{t}" for t in {torch.get_num_threads(), *threads}}  # default resolved
    assert all(v > 1e8 for v in peaks.values())  # any CPU this runs on does 0.1 GFLOP/s


def test_thread_scaling_sets_and_restores_the_thread_count():
    from benchmarks.core.timing import measure

    before = torch.get_num_threads()
    case = cases.build("threads", {"workload": "multihead", "threads": 1})
    record = measure.measure(case, "forward", min_run_time=0.01)
    assert record["threads"] == 1 and torch.get_num_threads() == before
    with pytest.raises(cases.Skip, match="above this machine"):
        cases.build("threads", {"workload": "attention", "threads": 10_000})
    with pytest.raises(ValueError, match="unknown workload 'gru'"):
        cases.build("threads", {"workload": "gru", "threads": 1})


def test_gemm_peak_benchmark_runs_and_skips_what_it_cannot():
    from benchmarks.bench_calibration import GemmPeak

    bench = GemmPeak()
    bench.setup("cpu", "float32")
    bench.time_matmul("cpu", "float32")
    with pytest.raises(cases.Skip, match="float16"):
        bench.setup("cpu", "float16")


@pytest.mark.parametrize("area", ["attention", "multihead", "models", "layers"])
def test_flop_track_equals_the_counted_flops(area):
    for p in cases.select(area, "quick", device="cpu")[:4]:
        case = cases.build(area, p)
        assert flops.count(case.forward).forward == case.flops.forward.matmul_total, p
        if case.generate is not None:
            assert flops.count(case.generate).forward == case.generate_flops.forward.matmul_total, p


def test_cuda_cases_skip_cleanly_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    for area in ("attention", "multihead", "models", "layers"):
        with pytest.raises(NotImplementedError, match="no CUDA device"):
            cases.build(area, cases.select(area, "quick", device="cuda")[0])


def test_grid_selection_and_bad_names():
    sdpa = cases.select("attention", "full", backend="sdpa", causal=True)
    assert sdpa and all(c["backend"] == "sdpa" and c["causal"] for c in sdpa)
    with pytest.raises(ValueError, match="unknown axes"):
        cases.select("attention", "quick", heads=8)
    with pytest.raises(ValueError, match="unknown grid 'huge'"):
        cases.combinations("attention", "huge")
    with pytest.raises(ValueError, match="unknown area"):
        cases.combinations("rnn", "quick")


@pytest.mark.parametrize("area", list(cases.METHODS))
def test_tokens_from_parameters_match_the_built_case(area):
    for p in cpu_params(CLASS_BY_AREA[area])[:4]:
        case = cases.build(area, p)
        for method in case.methods():
            assert cases.tokens(area, p, method) == case.work(method)[2], (area, p, method)
    with pytest.raises(ValueError, match="unknown area 'rnn'"):
        cases.tokens("rnn", {})


def test_depth_benchmark_tracks_the_recorded_graph():
    from benchmarks.core.timing import measure

    cls = CLASS_BY_AREA["depth"]
    for p in cpu_params(cls):
        bench, values = cls(), [p[n] for n in cls.param_names]
        bench.setup(*values)
        expected = measure.graph_metrics(cases.build("depth", p))
        assert bench.track_sequential_depth(*values) == expected["sequential_depth"] > 0
        assert bench.track_op_launches(*values) == expected["op_launches"] >= expected["sequential_depth"]
