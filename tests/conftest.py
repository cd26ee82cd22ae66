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

from run_helpers import FAKE_PEAK, quick_measuring  # noqa: E402  (after the cache is set)

from benchmarks.core.hardware import machine

atexit.register(shutil.rmtree, os.environ["ATTENTION_BENCH_CACHE"], ignore_errors=True)

NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=NO_CUDA)]
LOW_PRECISION = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _threads_as_they_were():
    """A test that leaves torch's thread count changed (an asv benchmark's setup sets its case's count: asv runs
    each in a process of its own) hands it back, so that the next test runs at the count it would alone."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _short_busy_check_and_controls():
    """Every test measures as run_helpers.quick_measuring says (the checks themselves are tested as they are)."""
    with quick_measuring():
        yield


@pytest.fixture
def fake_peaks(monkeypatch):
    """Known GEMM peaks instead of a calibration: fractions of peak become checkable, runs start at once."""
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
        machine.peak_key("cpu", "float32", t): FAKE_PEAK for t in (None, *threads)})
