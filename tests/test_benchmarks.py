"""Every asv benchmark's setup and body run once on the quick grid's CPU cases; FLOP tracks are counted."""

import importlib
import inspect
import pkgutil

import pytest

import benchmarks
from benchmarks import cases
from transformer import flops

MODULES = [importlib.import_module(f"benchmarks.{m.name}") for m in pkgutil.iter_modules(benchmarks.__path__)
           if m.name.startswith("bench_")]
CLASSES = [c for m in MODULES for n, c in vars(m).items() if inspect.isclass(c) and not n.startswith("_")
           and c.__module__ == m.__name__]
PREFIXES = ("time_", "peakmem_", "track_")


def cpu_params(cls):
    return cases.select(cls.area, "quick", device="cpu")


def test_every_module_has_a_benchmark_class_per_area():
    assert {c.area for c in CLASSES} == set(cases.GRIDS["quick"])
    for cls in CLASSES:
        assert cls.param_names == list(cases.axes(cls.area))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_setup_and_every_benchmark_body_run(cls):
    params, names = cpu_params(cls), cls.param_names
    methods = [n for n in dir(cls) if n.startswith(PREFIXES)]
    assert "time_forward" in methods and "track_matmul_flops" in methods
    for p in params:
        bench = cls()
        values = [p[n] for n in names]
        bench.setup(*values)
        for name in methods:
            result = getattr(bench, name)(*values)
            if name.startswith("track_"):
                assert isinstance(result, int) and result > 0


@pytest.mark.parametrize("area", list(cases.GRIDS["quick"]))
def test_flop_track_equals_the_counted_flops(area):
    for p in cases.select(area, "quick", device="cpu")[:4]:
        case = cases.build(area, p)
        assert flops.count(case.forward).forward == case.flops.forward.matmul_total, p
        if case.generate is not None:
            assert flops.count(case.generate).forward == case.generate_flops.forward.matmul_total, p


def test_cuda_cases_skip_cleanly_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    for area in cases.GRIDS["quick"]:
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
