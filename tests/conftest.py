"""Shared fixtures: the devices this machine has (CUDA cases skip cleanly without a GPU), a fixed seed, one torch
thread in this process, a short busy check and the performance model's constants measured quickly, once."""

import atexit
import contextlib
import io
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

# the performance model's constants and the counted graphs cached for this test session only (every command the
# tests start inherits it): never the user's cache, and measured once for all the runs the tests make. pytest-xdist's
# workers (pyproject's addopts: two) share the one their controller made (ATTENTION_BENCH_TESTS_CACHE names it).
os.environ["ATTENTION_BENCH_CACHE"] = os.environ["ATTENTION_BENCH_TESTS_CACHE"] = (
    os.environ["ATTENTION_BENCH_TESTS_CACHE"] if os.environ.get("PYTEST_XDIST_WORKER")
    and os.environ.get("ATTENTION_BENCH_TESTS_CACHE") else tempfile.mkdtemp(prefix="attention-bench-cache-"))

from run_helpers import FAKE_PEAK, machine_shared, once, quick_measuring  # noqa: E402  (after the cache is set)

from benchmarks.core.hardware import machine

if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller's, or the only process's: it removes the cache
    atexit.register(shutil.rmtree, os.environ["ATTENTION_BENCH_CACHE"], ignore_errors=True)

# torch's threads: one, here and in every process the tests start (the main job's rounds, its profiles, the paired
# workers, torchrun's ranks, asv's: OMP_NUM_THREADS, which their records state as their regime), unless a case sets
# its own count. The tests check what the code computes and records, not how fast. At two threads on a machine whose
# other core is busy (pytest-xdist's other worker, anything else), every parallel region waits for a thread that is
# not running and the waiting thread spins: the main job's rounds took twice the CPU time. A test of what the
# default count does removes the variable (``monkeypatch.delenv``).
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=NO_CUDA)]
LOW_PRECISION = [torch.float16, torch.bfloat16]


#: the session's longest set-ups (below): the files whose tests use them start first
FIRST = {"main_job", "asv_project"}


def pytest_collection_modifyitems(config, items):
    """The files whose tests use one of the session's longest set-ups first, then those with slow tests, then the
    rest, each file's tests in their order: pytest-xdist hands the files to its workers in this order (pyproject's
    --no-loadscope-reorder), so that the longest set-ups run beside everything else instead of last."""
    rank: dict[str, int] = {}
    for item in items:
        place = 0 if FIRST & set(item.fixturenames) else 1 if item.get_closest_marker("slow") else 2
        rank[item.path] = min(rank.get(item.path, 2), place)
    items.sort(key=lambda item: rank[item.path])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every test holds the machine shared, so that one that times two things against each other
    (``run_helpers.quiet_machine``) can have it to itself while pytest-xdist's other worker waits."""
    with machine_shared():
        return (yield)


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


@pytest.fixture(scope="session")
def main_job(tmp_path_factory):
    """The main job as the README runs it (three processes per case, profiles, the paired ratios, the report) on
    the quick grid's CPU cases, once per test session: (run folder, report folder, exit code, stdout). Its pairs
    get 3 s instead of 30 (the three sessions they take whatever the budget: a pair's record and its row in the
    page need no more) and C2's no more sessions than the others (``test_pairs`` times C2's further ones), a case in
    two modes one more process instead of two, and the calibration a 128 GEMM."""
    from attention_bench.cli import main
    from benchmarks import pairs
    from benchmarks.core.running import runner

    def make(tmp):
        run, report, out = str(tmp / "run"), str(tmp / "report"), io.StringIO()
        with quick_measuring() as mp, contextlib.redirect_stdout(out):
            mp.setattr(runner, "EXTRA_ROUNDS", 1)
            mp.setattr(pairs, "C2_ROUNDS", pairs.MIN_ROUNDS)
            mp.setattr(machine, "GEMM_SIZES", {**machine.GEMM_SIZES, "cpu": (128,)})
            code = main(["run", "--grid", "quick", "--device", "cpu", "--out", run, "--report", report, "--machine",
                         "box", "--min-run-time", "0.01", "--pairs-budget", "3", "--no-progress"])
        return run, report, code, out.getvalue()

    return once(tmp_path_factory, "main-job", make)


@pytest.fixture(scope="session")
def asv_project(tmp_path_factory):
    """A copy of this project in git, two commits ("first", "second"), each with asv's results of ASV_BENCHMARK
    (``asv run -E existing`` on the quick grid, as machine "box"), once per test session: (project, the
    environment the commands ran in, the two commits). Tests that change it work on a copy."""
    project, env, shas = once(tmp_path_factory, "asv-project", _asv_project)
    return pathlib.Path(project), env, shas


def _asv_project(tmp):
    from run_helpers import ASV_BENCHMARK, copy_project

    project, home = tmp / "project", tmp / "home"
    copy_project(project)
    git = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    env = {k: v for k, v in {**os.environ, "HOME": str(home), "ATTENTION_BENCH_GRID": "quick"}.items()
           if not k.startswith("ASV_")}
    asv = [sys.executable, "-m", "asv"]
    subprocess.run(asv + ["machine", "--yes", "--machine", "box"], cwd=project, env=env, check=True,
                   capture_output=True)
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "first"], ["branch", "-M", "main"]):
        subprocess.run(git + cmd, cwd=project, check=True, capture_output=True)
    shas = []
    for second in (False, True):
        if second:
            subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "second"], cwd=project, check=True)
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
        shas.append(sha)
        done = subprocess.run(asv + ["run", "-E", f"existing:{sys.executable}", "--quick", "--machine", "box",
                                     "--bench", ASV_BENCHMARK, "--set-commit-hash", sha],
                              cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    return str(project), env, shas


@pytest.fixture
def fake_peaks(monkeypatch):
    """Known GEMM peaks instead of a calibration: fractions of peak become checkable, runs start at once."""
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
        machine.peak_key("cpu", "float32", t): FAKE_PEAK for t in (None, *threads)})
