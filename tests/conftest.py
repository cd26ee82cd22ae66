"""Shared fixtures: the devices this machine has (CUDA cases skip cleanly without a GPU), a fixed seed, and a
short busy check."""

import pytest
import torch

from benchmarks.core import machine, measure, runner

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


@pytest.fixture
def fake_peaks(monkeypatch):
    """Known GEMM peaks instead of a calibration: fractions of peak become checkable, runs start at once."""
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
        machine.peak_key("cpu", "float32", t): 1e11 for t in (None, *threads)})
