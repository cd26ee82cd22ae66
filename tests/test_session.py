"""The test session's own machinery (run_helpers): pytest-xdist's workers make the session's set-ups once, and a
test that times two things against each other has the machine to itself while it does."""

import os
import subprocess
import sys
import textwrap

import pytest
from run_helpers import once, quiet_machine


class _Factory:
    """tmp_path_factory as a worker sees it: its own base folder inside the one the workers share."""

    def __init__(self, shared, worker):
        self.base = shared / f"popen-{worker}"
        self.base.mkdir(exist_ok=True)

    def getbasetemp(self):
        return self.base

    def mktemp(self, name):
        return self.base / name


def test_a_session_set_up_is_made_once_for_every_worker_and_again_after_a_try_that_raised(tmp_path, monkeypatch):
    made = []

    def make(folder):
        made.append(folder)
        (folder / "run").write_text("measured")
        return str(folder), 0

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = once(_Factory(tmp_path, "gw0"), "main-job", make)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    second = once(_Factory(tmp_path, "gw1"), "main-job", make)
    assert made == [tmp_path / "main-job"] and first == second == [str(tmp_path / "main-job"), 0]

    def fails(folder):
        (folder / "half").write_text("")
        raise RuntimeError("a worker's try that failed")

    with pytest.raises(RuntimeError):
        once(_Factory(tmp_path, "gw0"), "asv-project", fails)
    assert once(_Factory(tmp_path, "gw1"), "asv-project", lambda f: sorted(os.listdir(f))) == []  # made anew


def test_a_quiet_test_waits_for_the_other_workers_test_to_end(tmp_path):
    """Another worker's test holds the machine shared (conftest); quiet_machine starts once it has let go."""
    ended = tmp_path / "ended"
    other = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from run_helpers import machine_shared
        with machine_shared():
            print("holding", flush=True)
            time.sleep(0.5)
            open({str(ended)!r}, "w").close()
    """)
    worker = subprocess.Popen([sys.executable, "-c", other], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "holding"
        with quiet_machine():
            assert ended.exists()  # without the exclusive lock this test would be here 0.5 s before the other ended
    finally:
        worker.wait(timeout=60)
    assert worker.returncode == 0
