"""A commit history at the gate's precision (benchmarks.history): steps found where a case's ratio moved, drift
common to both sides not taken for one, commits with the same models timed once, a history resumed where it
stopped, and bad input named."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
from run_helpers import in_process

from attention_bench.cli import main as attention_bench
from benchmarks import gate, history
from benchmarks.core import envelope
from benchmarks.core.pairing import mirrored
from benchmarks.core.records import case_key, write_json_atomic

CASE = "attention--forward--backend=sdpa"


def record(commit: str, ratio: float, low: float, high: float, case: str = CASE) -> dict:
    return {"kind": "history", "commit": commit, "status": "ok",
            "cases": [{"case": case, "ratio": ratio, "low": low, "high": high}]}


def test_a_step_is_a_move_beyond_the_threshold_with_the_intervals_apart():
    records = [record("c0", 1.0, 1.0, 1.0), record("c1", 1.0, 0.98, 1.02), record("c2", 1.10, 1.07, 1.13),
               record("c3", 1.10, 1.08, 1.12), record("c4", 1.045, 1.02, 1.07), record("c5", 1.08, 0.99, 1.17)]
    found = history.steps(records, 0.05)
    assert [(s["commit"], s["previous"]) for s in found] == [("c2", "c1"), ("c4", "c3")]
    up, down = found
    assert up["change"] == pytest.approx(1.10) and up["low"] == pytest.approx(1.07 / 1.02) and up["low"] > 1
    assert down["change"] == pytest.approx(1.045 / 1.10) and down["high"] < 1  # a speed-up is a step too
    # c5 moved by 3% only, and its interval overlaps c4's: neither makes a step
    assert history.steps(records[:2] + [record("c2", 1.04, 1.03, 1.05)], 0.05) == []
    assert history.steps([record("c0", 1.0, 0.99, 1.01), record("c1", 1.2, 0.9, 1.5)], 0.05) == []


def paired_history(steps_at: dict[int, float], commits: int = 10, seed: int = 0) -> list[dict]:
    """Synthetic paired timings of one case per commit: both sides drift together (the machine) by up to 30%
    between rounds, each block has 2% noise of its own, and the commit's models are ``steps_at`` slower from
    that commit on; each commit's ratio estimated as the gate does (mirrored.estimate)."""
    rng, factor, out = np.random.default_rng(seed), 1.0, []
    for c in range(commits):
        factor *= steps_at.get(c, 1.0)
        drift = np.exp(np.cumsum(rng.normal(0, 0.05, 36)))  # the machine's speed, shared by both sides
        reference = 0.01 * drift * rng.lognormal(0, 0.02, 36)
        head = 0.01 * factor * drift * rng.lognormal(0, 0.02, 36)
        e = mirrored.estimate(list(head / reference), [r // mirrored.SESSION_ROUNDS for r in range(36)])
        out.append(record(f"c{c}", e.ratio, e.low, e.high))
    return out


def test_drift_common_to_both_sides_is_not_a_step_and_a_real_step_is_found():
    """Ten synthetic histories: no step where the models do not change, however the machine drifts; a 10% slowdown
    at commit 4 found in every one, a 5% speed-up at commit 8 in most, and no step anywhere else."""
    found = []
    for seed in range(10):
        assert history.steps(paired_history({}, seed=seed), 0.03) == []
        found.append([s["commit"] for s in history.steps(paired_history({4: 1.10, 8: 1 / 1.05}, seed=seed), 0.03)])
    assert all(f in (["c4"], ["c4", "c8"]) for f in found), found
    assert sum("c8" in f for f in found) >= 7, found


# -- the command's loop, on a throw-away repository with a fake comparison ----------------------------------

def git(repo, *args) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=repo,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository of five commits: the reference; the same models (a README change); other models; the same
    models again; the reference's models back. The gate's git commands run in it."""
    root = tmp_path / "repo"
    (root / "transformer").mkdir(parents=True)
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "cases.py").write_text("# the case definitions\n")
    git(root, "init", "-q")
    made = []
    for message, models, readme in (("reference", "v1", "a"), ("docs", "v1", "b"), ("models", "v2", "b"),
                                    ("docs again", "v2", "c"), ("revert", "v1", "c")):
        (root / "transformer" / "model.py").write_text(f"# models {models}\n")
        (root / "README.md").write_text(readme)
        git(root, "add", "-A")
        git(root, "commit", "-qm", message)
        made.append(git(root, "rev-parse", "HEAD"))
    monkeypatch.setattr(gate, "ROOT", str(root))
    return root, made


TODO = [("attention", {"seq_len": 128, "backend": "sdpa"}, "forward")]


def fake_compare(timed: list, ratio: float = 1.2, stop_at: str | None = None):
    def compare(base, head, todo, threshold, budget, path, progress=True, precision=None):
        timed.append(head)
        rows = [{"case": case_key(a, m, p), "ratio": ratio, "low": ratio - 0.01, "high": ratio + 0.01,
                 "verdict": "slower"} for a, p, m in todo]
        write_json_atomic(path, {"kind": "gate", "base": base, "head": head, "cases": rows})
        return rows, (KeyboardInterrupt() if head == stop_at else None)
    return compare


def test_commits_with_the_same_models_are_timed_once_and_a_history_resumes(repo, tmp_path, monkeypatch):
    root, made = repo
    commits = [made[0], *history.commits(f"{made[0]}..{made[-1]}")]  # A..B: after A, up to B
    assert commits == made
    timed = []
    monkeypatch.setattr(gate, "compare", fake_compare(timed))
    folder = str(tmp_path / "history")
    records = history.measure(commits, made[0], TODO, 0.05, 10, 100, folder, progress=False)
    assert timed == [made[2]]  # only the commit with other models is timed
    assert [r.get("same_as") for r in records] == [made[0], made[0], None, made[2], made[0]]
    assert envelope.problem(records[1]) is None and records[1]["commit"] == made[1]  # not timed, still enveloped
    assert [r["cases"][0]["ratio"] for r in records] == [1.0, 1.0, 1.2, 1.2, 1.0]
    assert [s["commit"] for s in history.steps(records, 0.05)] == [made[2], made[4]]
    again = history.measure(commits, made[0], TODO, 0.05, 10, 100, folder, progress=False)
    assert timed == [made[2]] and again == records  # resumed: nothing timed again


def test_ctrl_c_keeps_the_finished_commits_and_resumes_at_the_one_it_stopped_in(repo, tmp_path, monkeypatch):
    root, made = repo
    (root / "transformer" / "model.py").write_text("# models v3\n")
    git(root, "commit", "-qam", "v3")
    commits = [*made, git(root, "rev-parse", "HEAD")]
    timed = []
    monkeypatch.setattr(gate, "compare", fake_compare(timed, stop_at=commits[-1]))
    folder = tmp_path / "history"
    with pytest.raises(KeyboardInterrupt):
        history.measure(commits, made[0], TODO, 0.05, 10, 100, str(folder), progress=False)
    assert sorted(os.listdir(folder)) == sorted(f"{c}.json" for c in made)  # the stopped commit: no record
    monkeypatch.setattr(gate, "compare", fake_compare(timed))
    records = history.measure(commits, made[0], TODO, 0.05, 10, 100, str(folder), progress=False)
    assert timed == [made[2], commits[-1], commits[-1]] and len(records) == 6
    assert json.loads((folder / f"{commits[-1]}.json").read_text())["status"] == "ok"


def test_the_command_exits_1_on_a_step_and_names_it(repo, tmp_path, monkeypatch, capsys):
    root, made = repo
    monkeypatch.setattr(gate, "compare", fake_compare([]))
    monkeypatch.setattr(gate, "selection", lambda *args: TODO)
    assert attention_bench(["history", f"{made[0]}..{made[-1]}", "--history", str(tmp_path / "h"),
                            "--no-progress"]) == 1
    said = capsys.readouterr()
    # after made[0]: made[1] is the history's first commit, so its reference
    assert f"4 commits against {made[1][:8]}" in said.err
    assert "2 steps:" in said.out and f"{made[2][:8]} (after {made[1][:8]})" in said.out
    assert f"{made[4][:8]} (after {made[3][:8]})" in said.out and "x0.833" in said.out
    assert sorted(os.listdir(tmp_path / "h")) == sorted(f"{c}.json" for c in made[1:])


def test_bad_input_is_named(repo, tmp_path, capsys):
    root, made = repo
    with pytest.raises(ValueError, match="no commit in it"):
        history.commits(f"{made[-1]}..{made[0]}")
    with pytest.raises(ValueError, match="unknown commit 'nosuch'"):
        history.commits("nosuch..HEAD")
    with pytest.raises(ValueError, match="give a range of commits"):
        history.commits(None)
    with pytest.raises(ValueError, match=f"--reference {made[0][:8]} is not one of the 2 commits"):
        history.check(made[3:], made[0])
    empty = git(root, "hash-object", "-t", "tree", "-w", "--stdin")
    bare = git(root, "commit-tree", empty, "-m", "no models")
    with pytest.raises(ValueError, match=f"commit {bare[:8]} has no transformer/ folder"):
        history.check([bare, *made], None)
    (tmp_path / "list").write_text(f"{made[1]}  # the docs\n\nnosuch\n")
    with pytest.raises(ValueError, match="unknown commit 'nosuch'"):
        history.commits(None, str(tmp_path / "list"))
    code, err = in_process(capsys, "history", "--threshold", "2", f"{made[0]}..{made[-1]}")
    assert code == 2 and "--threshold 2.0: give a fraction between 0 and 1" in err


def test_a_history_times_until_its_intervals_are_narrow_not_until_a_verdict():
    """The gate stops at a verdict; a history needs intervals narrow enough to tell one commit from the next."""
    from benchmarks.core.pairing.mirrored import Estimate

    class Timed:  # what gate.run asks of a Gate: its rounds, then its estimates
        def __init__(self, estimates):
            self.estimates_now = estimates

        def run(self, decided, *args, settled=None):
            self.settled = settled
            return 7

        def estimates(self):
            return self.estimates_now

    wide = [Estimate(1.10, 1.06, 1.15, 30), None]  # slower than 3% for sure, yet 8.5% wide
    narrow = [Estimate(1.10, 1.09, 1.115, 60), None]
    assert gate.run(Timed(wide), 0.03, 10, False) == (7, True)
    assert gate.run(Timed(wide), 0.03, 10, False, precision=0.03) == (7, False)
    assert gate.run(Timed(narrow), 0.03, 10, False, precision=0.03) == (7, True)
    timed = Timed(wide)
    gate.run(timed, 0.03, 10, False, precision=0.03)  # a case within the precision is timed no more
    assert timed.settled(narrow[0]) and not timed.settled(wide[0])


def test_a_comparison_says_how_it_ended_in_the_terms_it_timed_to():
    rows = [{"verdict": "slower", "low": 1.06, "high": 1.15}, {"verdict": "inconclusive", "low": 0.99, "high": 1.01},
            {"verdict": "skipped"}]
    assert gate.ending(None, False, rows, 80) == "stopped at the 80 s budget with 1 cases inconclusive"
    assert gate.ending(None, False, rows, 80, 0.03) == "stopped at the 80 s budget with 1 cases' intervals wider " \
                                                       "than 3%"
    assert gate.ending(None, True, rows, 80, 0.03) == "every interval within 3%"
    assert gate.ending(KeyboardInterrupt(), False, rows, 80) == "interrupted"
