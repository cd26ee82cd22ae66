"""What the tests of run folders and command lines share: a short plan, a short sweep, the command lines."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch
from filelock import FileLock

from attention_bench.cli import main as attention_bench
from benchmarks.core.hardware import constants, control, machine
from benchmarks.core.running import runner

PLAN = [("models", {"model": "transformer", "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"}),
        ("models", {"model": "rnn-width", "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"})]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: a GEMM peak that stands in for a calibration: well above what a CPU core reaches (a case above its peak raises
#: it, so a peak a real case can exceed would not stay known)
FAKE_PEAK = 1e12
#: the asv benchmark the asv tests run (one class's FLOP count: quick, and it runs the class's setup_cache)
ASV_BENCHMARK = "bench_layers.SelfAttentionVsRecurrentLayer.track_matmul_flops"


_MEASURE, _QUICK = constants.measure, {}


def _quick_constants(device="cpu", dtype="float32", quick=False):
    """The performance model's constants as a run measures them (constants_cache.this_machine), but quick and
    once per device, dtype and thread count for the whole session (seconds each; dozens of runs use them)."""
    key = (device, dtype, torch.get_num_threads())
    if key not in _QUICK:
        _QUICK[key] = _MEASURE(device, dtype, quick=True)
    return _QUICK[key]


@contextlib.contextmanager
def quick_measuring():
    """Every run watches the cores for half a second before it starts (machine.machine_busy), every CPU
    method-round times a control GEMM for 10 ms before and after it (control.CONTROL_TIME), a calibration
    times GEMMs of 1024 and 2048 for 0.3 s each (machine.GEMM_SIZES, PEAK_TIME) and the performance model's
    constants take seconds; the tests make dozens of short runs in one process, so there these take 50 ms,
    2 ms, one 512 GEMM for 50 ms and one quick measurement per session. Every test runs in it (conftest),
    and so do the fixtures that measure for a whole module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(machine, "BUSY_SAMPLE_S", 0.05)
        mp.setattr(control, "CONTROL_TIME", 0.002)
        mp.setattr(machine, "PEAK_TIME", 0.05)
        mp.setattr(machine, "GEMM_SIZES", {**machine.GEMM_SIZES, "cpu": (512,)})
        mp.setattr(constants, "measure", _quick_constants)
        yield mp


def measure(folder, plan=PLAN, name="vm", rounds=1):
    runner.Runner(str(folder), min_run_time=0.01, name=name, rounds=rounds).run(plan, progress=False)
    return str(folder)


_RUNS: dict[str, str] = {}


def measured_run(folder, plan=PLAN) -> str:
    """A run of ``plan`` at ``folder``, as ``measure`` makes it with FAKE_PEAK for the calibration: measured once per
    test session and copied, for the tests that read, damage or extend a run rather than test how one is measured."""
    key = json.dumps(plan, sort_keys=True)
    if key not in _RUNS:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
                machine.peak_key("cpu", "float32", t): FAKE_PEAK for t in (None, *threads)})
            home = tempfile.mkdtemp(prefix="attention-bench-run-")
            atexit.register(shutil.rmtree, home, ignore_errors=True)
            _RUNS[key] = measure(os.path.join(home, "run"), plan)
    shutil.copytree(_RUNS[key], folder)
    return str(folder)


def files(folder):
    """Every file under ``folder`` with its bytes: what must not change."""
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.relpath(os.path.join(root, n), folder)] = f.read()
    return out


#: the main job's measuring only: no profile, no pairs, no report
MEASURE_ONLY = ("run", "--no-report", "--no-profile", "--pairs-budget", "0")


def cli(*args):
    """``attention-bench ARGS`` in a real subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "attention_bench", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def in_process(capsys, *args):
    """``attention-bench ARGS`` in this process (faster); (exit code, stderr)."""
    try:
        code = attention_bench(list(args))
    except SystemExit as exit:  # argparse's errors
        code = exit.code
    return code, capsys.readouterr().err


def copy_project(project) -> None:
    """The files git tracks or would track (not ignored) of this checkout, copied into ``project``; skips the
    test when this is not a git checkout."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    for name in listed.stdout.splitlines():
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(project / os.path.dirname(name), exist_ok=True)
            shutil.copyfile(os.path.join(ROOT, name), project / name)


#: Debian's chromium, how the browser tests start it (no background connections on a closed network), and
#: where they keep screenshots
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                  "--disable-component-update", "--disable-sync"]
ARTIFACTS = os.environ.get("ATTENTION_BENCH_ARTIFACTS", os.path.join(ROOT, "artifacts"))


def chromium_page(playwright, errors: list):
    """(browser, page) in headless Chromium, 1200 x 900; console errors, page errors and failed requests are
    appended to ``errors``."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"failed to load {r.url}"))
    return browser, page


def once(tmp_path_factory, name: str, make):
    """``make(folder)``, JSON-serialisable, once per test session, however many pytest-xdist workers run it: the
    first worker to ask makes it in a folder they all share, the others wait for it and read what it returned (a
    tuple as a list). Tests that change what it made work on a copy."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent
    done = shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.is_file():
            folder = shared / name
            shutil.rmtree(folder, ignore_errors=True)  # a worker's try that raised
            folder.mkdir()
            done.write_text(json.dumps(make(folder)))
        return json.loads(done.read_text())


_MACHINE_LOCK: int | None = None


def _machine_lock() -> int:
    """This process's descriptor of the test session's machine lock (a file in its cache folder, which
    pytest-xdist's workers share: conftest)."""
    global _MACHINE_LOCK
    if _MACHINE_LOCK is None:
        _MACHINE_LOCK = os.open(os.path.join(os.environ["ATTENTION_BENCH_CACHE"], "machine.lock"),
                                os.O_RDWR | os.O_CREAT, 0o644)
    return _MACHINE_LOCK


@contextlib.contextmanager
def machine_shared():
    """The machine, shared with the tests of pytest-xdist's other workers (every test holds it: conftest)."""
    fcntl.flock(_machine_lock(), fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(_machine_lock(), fcntl.LOCK_UN)


@contextlib.contextmanager
def quiet_machine():
    """The machine to this test alone while it times two things against each other: pytest-xdist's other workers
    finish the test they are in and wait (without xdist, nothing changes). Load from outside the test session
    stays: the test must hold on a busy machine all the same."""
    fd = _machine_lock()
    fcntl.flock(fd, fcntl.LOCK_EX)  # from shared (conftest) to exclusive, once the other holders let go
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_SH)


class StandInWorker:
    """The start and stop of a worker process (``workers.Worker``: ``launch`` then ``built``, ``quit`` then
    ``stop``) for a stand-in that defines ``start(todo)``, as ``MirroredRounds`` calls them."""

    def launch(self, todo):
        self._errors = self.start(todo)

    def built(self):
        return self._errors

    def quit(self):
        pass

    def stop(self):
        pass


def pairs_record(pairs_rows: list[dict]) -> dict:
    """A pairs record (``benchmarks.pairs``) holding ``pairs_rows``, as the paired analysis reads it."""
    return {"kind": "pairs", "grid": "default", "device": "cpu", "rounds": 20, "threads": 2, "pairs": pairs_rows}


def paired_row(kind: str, params: dict, ratio: float, low: float, high: float) -> dict:
    """One measured pair of a pairs record: its ratio b/a with its interval, over 20 rounds."""
    return {"kind": kind, "params": params, "status": "ok", "ratio": ratio, "low": low, "high": high, "rounds": 20,
            "a_s": 0.1, "b_s": 0.1 * ratio}
