"""Records say what they measured: a working tree with edits to the measured code is part of the commit's
identity, a record agrees with its file name, and a resumed run keeps every calibration it had."""

from __future__ import annotations

import os
import subprocess

import pytest
from run_helpers import PLAN

from benchmarks.core import records
from benchmarks.core.hardware import constants_cache, machine
from benchmarks.core.running import runner


def git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    for name, text in (("transformer/model.py", "x = 1\n"), ("benchmarks/cases.py", "y = 1\n"), ("README.md", "")):
        os.makedirs(root / os.path.dirname(name), exist_ok=True)
        (root / name).write_text(text)
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    return root


def test_edits_to_the_measured_code_are_part_of_the_commit(repo):
    clean = records.commit(str(repo))
    assert len(clean) == 40 and records.DIRTY not in clean
    (repo / "README.md").write_text("docs only")  # not measured code: still the clean commit
    assert records.commit(str(repo)) == clean
    (repo / "transformer" / "model.py").write_text("x = 1\nimport time; time.sleep(0.004)\n")
    slept = records.commit(str(repo))
    assert slept.startswith(clean + records.DIRTY) and records.short(slept) == clean[:8] + slept[40:55]
    (repo / "transformer" / "model.py").write_text("x = 2\n")
    assert records.commit(str(repo)) not in (clean, slept)  # another edit, another identity
    (repo / "transformer" / "model.py").write_text("x = 1\n")
    assert records.commit(str(repo)) == clean
    (repo / "benchmarks" / "new_area.py").write_text("z = 1\n")  # an untracked file of the measured code
    assert records.DIRTY in records.commit(str(repo))


def test_a_dirty_trees_records_are_not_resumed_as_the_clean_commits(tmp_path, monkeypatch, fake_peaks):
    area, params = PLAN[0]
    clean = runner.Runner(str(tmp_path / "run"), min_run_time=0.01, name="vm")
    clean.commit = "a" * 40
    clean.write(area, "forward", params, "skipped", "x", 0.0)
    assert clean.recorded(area, "forward", params)[0] == 1
    dirty = runner.Runner(str(tmp_path / "run"), min_run_time=0.01, name="vm")
    dirty.commit = "a" * 40 + records.DIRTY + "0123456789ab"
    assert dirty.recorded(area, "forward", params) == (0, None)  # measured again, not "already recorded"


def test_a_record_filed_under_another_cases_name_is_set_aside_and_measured_again(tmp_path, capsys):
    area, params = PLAN[0]
    r = runner.Runner(str(tmp_path / "run"), min_run_time=0.01, name="vm")
    r.write(area, "forward", params, "skipped", "x", 0.0)
    path = r.path(records.case_key(area, "forward", params))
    wrong = {**records.read_json(path), "params": {**params, "seq_len": 4096}}
    records.write_json_atomic(path, wrong)
    assert r.recorded(area, "forward", params) == (0, None)
    assert "seq_len=4096" in capsys.readouterr().err and not os.path.exists(path) and r.set_aside
    # the report's reading says the same
    assert records.case_problem(path, wrong) and records.case_problem(
        path, {**wrong, "params": dict(reversed(list(params.items())))}) is None  # the order of params is not a name


def test_a_resume_that_adds_the_constants_keeps_the_earlier_calibrations(tmp_path, monkeypatch):
    r = runner.Runner(str(tmp_path / "run"), min_run_time=0.01, name="vm")
    keys = [machine.peak_key("cpu", "float32", t) for t in (None, 1)]
    earlier = {k: 5e10 for k in keys}
    records.write_json_atomic(os.path.join(r.out, "machine.json"), {
        "machine": machine.metadata(), "gemm_peaks": earlier, "calibrations": [earlier], "commit": r.commit})
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: {k: 4e10 for k in keys})
    monkeypatch.setattr(constants_cache, "this_machine",
                        lambda threads, kept, quick, *rest: {k: {"x": 1} for k in keys})
    peaks = r.calibrate([1])
    saved = records.read_json(os.path.join(r.out, "machine.json"))
    assert saved["calibrations"][0] == earlier and len(saved["calibrations"]) == 2
    assert peaks == earlier  # the best of both
