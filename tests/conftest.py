"""Shared fixtures: the devices this machine has (CUDA cases skip cleanly without a GPU), a fixed seed, a
short busy check and the performance model's constants measured quickly, once."""

import atexit
import os
import shutil
import tempfile

import pytest
import torch

# the performance model's constants cached for this test session only (every command the tests start inherits
# it): never the user's cache, and measured once for all the runs the tests make
os.environ["ATTENTION_BENCH_CACHE"] = tempfile.mkdtemp(prefix="attention-bench-cache-")

from benchmarks.core import constants, machine, measure, runner

atexit.register(shutil.rmtree, os.environ["ATTENTION_BENCH_CACHE"], ignore_errors=True)

NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=NO_CUDA)]
LOW_PRECISION = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _short_busy_check_and_controls(monkeypatch):
    """Every run watches the cores for half a second before it starts (runner.machine_busy), and every CPU
    method-round times a control GEMM for 10 ms before and after it (measure.CONTROL_TIME); the tests make
    dozens of short runs in one process, so there they take 50 ms and 2 ms (the checks themselves are
    tested as they are)."""
    monkeypatch.setattr(runner, "BUSY_SAMPLE_S", 0.05)
    monkeypatch.setattr(measure, "CONTROL_TIME", 0.002)
    monkeypatch.setattr(constants, "measure", _quick_constants)


_MEASURE, _QUICK = constants.measure, {}


def _quick_constants(device="cpu", dtype="float32", quick=False):
    """The performance model's constants as a run measures them (runner.machine_constants), but quick and
    once per device, dtype and thread count for the whole session (seconds each; dozens of runs use them)."""
    key = (device, dtype, torch.get_num_threads())
    if key not in _QUICK:
        _QUICK[key] = _MEASURE(device, dtype, quick=True)
    return _QUICK[key]


@pytest.fixture
def fake_peaks(monkeypatch):
    """Known GEMM peaks instead of a calibration: fractions of peak become checkable, runs start at once."""
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
        machine.peak_key("cpu", "float32", t): 1e11 for t in (None, *threads)})
