"""The regression gate (benchmarks.gate): paired statistics that cancel a drift common to both sides, the
command end to end on an injected slowdown in a throw-away clone, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from run_helpers import StandInWorker

from attention_bench.cli import main as attention_bench
from benchmarks import gate as gate_library
from benchmarks.core import envelope
from benchmarks.core.pairing import mirrored, workers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def mirrored_rounds(shift: float, rounds: int = 30, drift: float = 2.0, noise: float = 0.03, seed: int = 1):
    """Per-round ratios of A B B A blocks (B A A B on odd rounds) on a machine slowing down linearly by
    ``drift`` over the run, both sides alike, with ``noise`` per block; B is ``shift`` slower than A."""
    rng = np.random.default_rng(seed)
    steps = rounds * 4
    speed = 1 + (drift - 1) * np.arange(steps) / steps  # seconds per unit of work at each block
    ratios = []
    for r in range(rounds):
        order = ["a", "b", "b", "a"] if r % 2 == 0 else ["b", "a", "a", "b"]
        got = {"a": [], "b": []}
        for k, side in enumerate(order):
            work = 1 + shift if side == "b" else 1.0
            got[side].append(work * speed[4 * r + k] * np.exp(rng.normal(0, noise)))
        ratios.append(mirrored.round_ratio(got["a"], got["b"]))
    return ratios


def test_a_10_percent_shift_under_a_2x_drift_is_detected_and_the_drift_alone_is_not():
    slow = mirrored.estimate(mirrored_rounds(0.10))
    assert slow.verdict(0.05) == "slower" and slow.low > 1.05 and 1.07 < slow.ratio < 1.13
    for seed in range(5):
        same = mirrored.estimate(mirrored_rounds(0.0, seed=seed))
        assert same.verdict(0.05) == "unchanged" and same.low < 1 < same.high
    # unpaired, the same drift would look like a 2x change: the first blocks against the last
    assert mirrored.estimate(mirrored_rounds(-0.10)).verdict(0.05) == "faster"


def test_too_few_rounds_are_inconclusive_never_a_verdict():
    assert mirrored.estimate([1.3]).verdict(0.05) == "inconclusive"
    wide = mirrored.estimate([0.8, 1.4, 0.9, 1.5])
    assert wide.verdict(0.05) == "inconclusive"


class FakeWorker(StandInWorker):
    """Stands in for a worker process: logs what it is asked, answers 10 ms a call."""

    regime, settle = {"threads": 1, "env": {}}, 0

    def __init__(self, label: str, log: list):
        self.label, self.log = label, log

    def start(self, todo):
        self.log.append((self.label, "start"))
        return [None] * len(todo)

    def ask(self, request, timeout=None):
        self.log.append((self.label, next((k for k in ("probe", "warm") if k in request), "block")))
        self.warm_calls = request["calls"] if "warm" in request else getattr(self, "warm_calls", None)
        return {"seconds": 0.01}


def test_rounds_alternate_mirrored_orders_and_every_session_warms_both_sides_first():
    from benchmarks import gate

    log = []
    g = gate.Gate([("attention", {}, "forward")], FakeWorker("base", log), FakeWorker("head", log))
    g.start()
    for r in range(mirrored.SESSION_ROUNDS + 2):
        g.round(r)
    blocks = [label[0] for label, what in log if what == "block"]
    assert blocks[:8] == list("bhhbhbbh")  # A B B A, then B A A B
    sessions = [i for i, entry in enumerate(log) if entry[1] == "start"]
    assert len(sessions) == 4  # two workers, started twice
    # once both workers of a session have started, both warm the case: the first time with a probe, which sizes
    # its blocks, then with as many calls as a probe makes
    for started, how in ((sessions[1], "probe"), (sessions[3], "warm")):
        assert sorted(log[started + 1:started + 3]) == [("base", how), ("head", how)], log
    assert g.calls == [round(gate.BLOCK_S / 0.01)] and len(g.ratios[0]) == mirrored.SESSION_ROUNDS + 2
    assert g.base.warm_calls == g.head.warm_calls == mirrored.WARM_CALLS


def test_a_pair_settled_is_left_out_of_later_rounds_and_the_others_go_on():
    from benchmarks import gate

    log = []
    todo = [("attention", {"n": 1}, "forward"), ("attention", {"n": 2}, "forward")]
    g = gate.Gate(todo, FakeWorker("base", log), FakeWorker("head", log))
    g.start()
    asked = []  # the first pair's estimate is the first asked about: it alone is settled

    def settled(estimate):
        asked.append(estimate)
        return len(asked) == 1

    rounds = g.run(lambda estimates: False, 60.0, 4, 8, settled=settled)
    assert rounds == 8 and g.settled == {0}
    assert len(g.ratios[0]) == 4 and len(g.ratios[1]) == 8  # settled at round 4, when first asked


# -- the command, on a throw-away clone -----------------------------------------------------------

def clone(tmp_path, change: str | None = None) -> tuple[str, str]:
    """A clone of this repository's HEAD, with a commit on top appending ``change`` to equation (1)'s
    module if given; (its folder, its base commit)."""
    repo = str(tmp_path / "repo")
    subprocess.run(["git", "clone", "-q", ROOT, repo], check=True)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    if change is not None:
        with open(os.path.join(repo, "transformer", "attention.py"), "a") as f:
            f.write(change)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "change"],
                       cwd=repo, check=True)
    return repo, base


def gate(repo: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attention_bench", "gate", *args, "--no-progress"], cwd=repo,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_an_injected_2x_slowdown_fails_the_gate_and_is_saved(tmp_path):
    from gate_sensitivity import SPIN

    repo, base = clone(tmp_path, SPIN.format(x=1.0))
    record = str(tmp_path / "gate.json")
    # the sdpa backend: the math backend at n = 128 runs at one of two speeds per process (11 or 19 ms here)
    done = gate(repo, base, "HEAD", "--grid", "quick", "--area", "attention", "--device", "cpu", "--param",
                "backend=sdpa", "--param", "seq_len=128", "--budget", "60", "--record", record)
    assert done.returncode == 1, done.stderr[-2000:]
    saved = json.load(open(record))
    assert saved["kind"] == "gate" and len(saved["cases"]) == 2  # causal and not
    assert envelope.problem(saved) is None and saved["commit"] == saved["head"]  # the one envelope
    assert saved["machine"]["cpu_count"] == os.cpu_count() and saved["threads"] >= 1  # the conditions it ran under
    # at least the injected 2x (less the noise); more where the real call was preempted, since the spin lasts
    # as long as the call's elapsed time
    assert all(c["verdict"] == "slower" and c["ratio"] > 1.5 for c in saved["cases"]), [
        (c["ratio"], c["low"], c["verdict"]) for c in saved["cases"]]
    assert "2 slower than 5%" in done.stderr and "slower" in done.stdout


def test_bad_input_is_a_clear_error_exit_2(tmp_path, monkeypatch, capsys):
    repo, base = clone(tmp_path)
    monkeypatch.setattr(gate_library, "ROOT", repo)  # its input checks, in this process (a worker is never started)
    monkeypatch.chdir(repo)

    def gate(repo, *args):
        code = attention_bench(["gate", *args, "--no-progress"])
        return subprocess.CompletedProcess(args, code, "", capsys.readouterr().err)

    for args, says in ((["nosuchcommit"], "unknown commit 'nosuchcommit'"),
                       ([base, base], "have the same models (transformer/): nothing to compare"),
                       ([base], "have the same models"),
                       ([base, "HEAD", "--threshold", "5"], "--threshold 5.0: give a fraction between 0 and 1")):
        done = gate(repo, *args)
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    with open(os.path.join(repo, "transformer", "attention.py"), "a") as f:
        f.write("\n# head differs\n")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "head"], cwd=repo,
                   check=True)
    for param, says in (("backend=fast", "backend is never 'fast' on grid 'default'; allowed: math, sdpa"),
                        ("colour=red", "no axis 'colour' in the chosen cases"), ("backend", "give AXIS=VALUE")):
        done = gate(repo, base, "HEAD", "--area", "attention", "--param", param)
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    empty = subprocess.run(["git", "hash-object", "-t", "tree", "-w", "--stdin"], cwd=repo, input="",
                           capture_output=True, text=True).stdout.strip()
    bare = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit-tree", empty, "-m",
                           "before the models"], cwd=repo, capture_output=True, text=True).stdout.strip()
    done = gate(repo, bare, "HEAD")
    assert done.returncode == 2 and f"commit {bare[:8]} has no transformer/ folder" in done.stderr, done.stderr
    with open(os.path.join(repo, "benchmarks", "cases.py"), "a") as f:
        f.write("\n# an uncommitted change\n")
    done = gate(repo, base)
    assert done.returncode == 2 and "case definitions (benchmarks/), which have uncommitted changes" in done.stderr


@pytest.mark.slow
def test_a_worker_that_dies_is_named_exit_2(tmp_path):
    repo, _ = clone(tmp_path, "\nimport os as _os\n_os._exit(3)\n")  # models that end the process on import
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "revert", "--no-edit", "HEAD"],
                   cwd=repo, check=True, capture_output=True)
    done = gate(repo, "HEAD~1", "HEAD", "--area", "attention", "--device", "cpu")  # the base worker dies
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error: the base worker" in done.stderr and "ended (exit code 3)" in done.stderr


# -- what stops a comparison: every case skipped, Ctrl-C, a worker that stops answering ---------------------

class CannedWorker(FakeWorker):
    """A FakeWorker whose cases fail to build (``build_error``) or whose ``stop_after``-th block is a Ctrl-C."""

    build_error, stop_after = None, None

    def __init__(self, label, models=None, suite=None, env=None):
        super().__init__(label, [])
        self.models = models

    def start(self, todo):
        return [self.build_error] * len(todo)

    def ask(self, request, timeout=None):
        blocks = sum(1 for _, what in self.log if what == "block")
        if "probe" not in request and self.stop_after is not None and blocks >= self.stop_after:
            raise KeyboardInterrupt
        return super().ask(request, timeout)


def canned_gate(monkeypatch, tmp_path, capsys, **worker):
    from benchmarks import gate

    monkeypatch.setattr(gate, "Worker", type("W", (CannedWorker,), worker))
    monkeypatch.setattr(gate, "export", lambda commit, into: into)
    monkeypatch.setattr(gate, "check_sides", lambda base, head: None)
    record = str(tmp_path / "gate.json")
    code = attention_bench(["gate", "HEAD", "HEAD", "--grid", "quick", "--area", "attention", "--device", "cpu",
                            "--param", "backend=sdpa", "--budget", "5", "--record", record, "--no-progress"])
    return code, capsys.readouterr(), json.load(open(record))


def test_a_gate_that_compared_nothing_is_not_a_pass(monkeypatch, tmp_path, capsys):
    code, said, saved = canned_gate(monkeypatch, tmp_path, capsys, build_error="Skip: too big for this machine")
    assert code == 2 and "nothing was compared" in said.err and "which is not a pass" in said.err
    assert {c["verdict"] for c in saved["cases"]} == {"skipped"}


def test_ctrl_c_in_the_gate_keeps_the_rounds_measured_exit_130(monkeypatch, tmp_path, capsys):
    # Ctrl-C after 3 rounds of 4 cases, 2 blocks each
    code, said, saved = canned_gate(monkeypatch, tmp_path, capsys, stop_after=3 * 2 * 4)
    assert code == 130 and "interrupted" in said.err and saved["stopped"] == "interrupted"
    assert saved["rounds"] == 3 and all(len(c["round_ratios"]) == 3 for c in saved["cases"])
    assert "ratio" in said.out and "(round" in said.out  # the columns say which estimator each is


def test_a_block_waits_no_longer_than_the_budget_and_its_grace():
    from benchmarks import gate

    class Timed(FakeWorker):
        def ask(self, request, timeout=None):
            timeouts.append((next((k for k in ("probe", "warm") if k in request), "block"), timeout))
            return super().ask(request, timeout)

    timeouts = []
    g = gate.Gate([("attention", {}, "forward")], Timed("base", []), Timed("head", []))
    g.handover_s = 0.0  # this budget of 0.2 s reaches a new session only without the handover pauses
    g.start()
    assert {t for _, t in timeouts} == {workers.WORKER_TIMEOUT_S}  # before the budget starts: building, warming
    timeouts.clear()
    g.run(lambda e: False, 0.2, 2, 2 * mirrored.SESSION_ROUNDS + 1)  # through a new session's warm-ups, too
    waits = [t for _, t in timeouts]
    assert {"warm", "block"} <= {kind for kind, _ in timeouts}
    assert max(waits) <= 0.2 + mirrored.STALL_GRACE_S and min(waits) >= mirrored.STALL_GRACE_S - 1


def test_the_gate_pauses_before_each_block_of_the_other_worker_only(monkeypatch):
    from benchmarks import gate

    log, sleeps = [], []
    monkeypatch.setattr(mirrored.time, "sleep", lambda s: (sleeps.append(s), log.append(("pause", "pause"))))
    g = gate.Gate([("attention", {}, "forward"), ("attention", {}, "backward")], FakeWorker("base", log),
                  FakeWorker("head", log))
    assert g.handover_s == mirrored.HANDOVER_S > 0
    g.start()
    log.clear()
    g.round(0)  # two pairs: b h h b, b h h b
    seen = [label[0] if what == "block" else "|" for label, what in log]
    assert "".join(seen) == "|b|hh|bb|hh|b"  # a pause at every change of worker, none between one worker's blocks
    assert set(sleeps) == {mirrored.HANDOVER_S}
    # a pair in one worker (the verdicts' pairs) never pauses
    w = FakeWorker("cases", [])
    sleeps.clear()
    one = mirrored.MirroredRounds([w], [("a", {}, "f"), ("b", {}, "f")],
                                 [(mirrored.Side(w, 0), mirrored.Side(w, 1))], 0.05)
    one.start()
    one.round(0)
    assert sleeps == []


@pytest.mark.slow
def test_a_worker_that_stops_answering_is_named_within_its_timeout():
    proc = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    w = workers.Worker("base", "models", "suite", proc=proc)
    import tempfile
    w.log = tempfile.TemporaryFile(mode="w+")
    try:
        with pytest.raises(workers.WorkerDied, match="the base worker .* gave no answer within 0.3 s"):
            w.ask({"case": 0, "calls": 1}, timeout=0.3)
    finally:
        proc.kill()
        proc.wait()
