"""A command replaces only what it made: a report folder it recognises, its own record or CSV, whole or not at
all; anything else is refused, naming it, before anything is measured or written."""

from __future__ import annotations

import errno
import json
import os

import pandas as pd
import pytest
from run_helpers import MEASURE_ONLY, files, in_process

from benchmarks import pairs
from benchmarks.core import records
from reports import columns, html, measured, sensitivity, tidy


def full_disk(monkeypatch):
    """Every file opened by the atomic writers fails its first write with ENOSPC."""
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: Full(real_fdopen(fd, *a, **k)))


def fake_run(folder, commit=None):
    """A run folder's files (what must survive): machine.json, a case record, the pairs and a user's note."""
    os.makedirs(folder / "cases")
    (folder / "machine.json").write_text(json.dumps({"machine": {}, "gemm_peaks": {}, "commit": commit}))
    (folder / "cases" / "models--forward--seq_len=16.json").write_text("{}")
    (folder / "pairs-cpu.json").write_text(json.dumps({"kind": "pairs", "pairs": []}))
    (folder / "notes.txt").write_text("mine")
    return folder


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_report_into_the_run_it_reads_or_a_folder_holding_runs_is_refused(tmp_path, capsys, command):
    a, b = fake_run(tmp_path / "runs" / "a"), fake_run(tmp_path / "runs" / "b")
    before = files(tmp_path)
    for report, said in ((a, "is the results"), (tmp_path / "runs", "holds the results")):
        code, err = in_process(capsys, command, str(a), str(b), "--report", str(report))
        assert code == 2 and said in err and str(report) in err
    assert files(tmp_path) == before


def test_a_folder_of_a_users_files_is_not_replaced_by_a_report(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("months of work")
    code, err = in_process(capsys, "report", str(fake_run(tmp_path / "run")), "--report", str(mine))
    assert code == 2 and "thesis.tex" in err and "not a report folder" in err
    assert (mine / "thesis.tex").read_text() == "months of work"


def test_measure_refuses_a_report_in_its_own_run_folder_before_measuring(tmp_path, capsys):
    run = tmp_path / "run"
    code, err = in_process(capsys, "run", "--grid", "quick", "--out", str(run), "--report", str(run),
                           "--no-progress")
    assert code == 2 and "--report" in err and "is the results" in err
    assert not os.path.exists(run / "cases")  # refused before anything was measured


def test_a_report_folder_this_command_wrote_is_recognised_and_nothing_else(tmp_path):
    report = tmp_path / "r"
    report.mkdir()
    html.check_replaceable(str(report))  # empty: fine
    (report / "index.html").write_text("<html>")
    with pytest.raises(ValueError, match="not a report folder"):
        html.check_replaceable(str(report))  # a page without its record is somebody else's
    (report / "report.json").write_text(json.dumps({k: [] for k in html.REPORT_FIELDS}))
    html.check_replaceable(str(report))
    (report / "report.json").write_text(json.dumps({"generated": "x"}))  # another tool's report.json
    with pytest.raises(ValueError, match="not a report folder"):
        html.check_replaceable(str(report))
    with pytest.raises(ValueError, match="is a file"):
        html.check_replaceable(str(report / "index.html"))


def test_csv_replaces_only_a_csv_it_wrote_and_never_leaves_a_partial_one(tmp_path, capsys, monkeypatch):
    run = fake_run(tmp_path / "run")
    before = files(run)
    code, err = in_process(capsys, "csv", str(run), "--csv", str(run / "machine.json"))
    assert code == 2 and "machine.json" in err and "not a CSV this command wrote" in err
    assert files(run) == before
    out = tmp_path / "t.csv"
    frame = pd.DataFrame({"source": ["runner"], "run": ["r"], "value": [1.0]})
    columns.write_csv(frame, str(out))
    columns.write_csv(frame.assign(value=2.0), str(out))  # its own CSV: replaced
    assert pd.read_csv(out).value.tolist() == [2.0]

    full_disk(monkeypatch)
    with pytest.raises(OSError):
        columns.write_csv(frame.assign(value=3.0), str(out))
    monkeypatch.undo()
    assert pd.read_csv(out).value.tolist() == [2.0]  # the old file whole


def test_the_atomic_write_leaves_the_old_file_on_a_full_disk(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    records.write_text_atomic(str(path), "a,b\n1,2\n")
    full_disk(monkeypatch)
    with pytest.raises(OSError):
        records.write_text_atomic(str(path), "x" * 10_000)
    monkeypatch.undo()
    assert path.read_text() == "a,b\n1,2\n" and os.listdir(tmp_path) == ["t.csv"]


def test_a_script_record_replaces_only_a_record_of_its_kind(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"machine": {}, "gemm_peaks": {}}))  # a run's machine.json
    with pytest.raises(ValueError, match="not a record of kind 'prediction'"):
        measured.save(str(path), "prediction", None, cases=1)
    assert json.loads(path.read_text()) == {"machine": {}, "gemm_peaks": {}}
    other = tmp_path / "p.json"
    measured.save(str(other), "prediction", None, cases=1)
    measured.save(str(other), "prediction", None, cases=2)
    assert json.loads(other.read_text())["cases"] == 2


def test_an_empty_gate_sensitivity_record_is_passed_over_with_a_warning(tmp_path, capsys):
    measured.save(str(tmp_path / "empty.json"), "gate-sensitivity", None, trials=0, budget_s=1, seconds=0,
                  results={"python -m benchmarks.gate": {}}, done=True)
    assert sensitivity.latest([str(tmp_path / "*.json")]) is None
    assert "no trial" in capsys.readouterr().err


def test_pairs_of_one_kind_keep_the_other_kinds_of_this_commit(tmp_path, monkeypatch):
    record = tmp_path / "pairs-cpu.json"
    heads = {"kind": "heads", "params": {}, "status": "skipped", "reason": "x"}
    c1 = {"kind": "c1", "params": {}, "status": "skipped", "reason": "old"}
    records.write_json_atomic(str(record), {"kind": "pairs", "grid": "quick", "device": "cpu",
                                            "commit": records.commit(), "pairs": [heads, c1]})
    assert pairs.kept_pairs(str(record), ["c1"], "quick", "cpu") == [heads]
    assert pairs.kept_pairs(str(record), ["c1"], "default", "cpu") == []  # another grid's: replaced whole
    (tmp_path / "cases.json").write_text(json.dumps({"area": "models"}))
    with pytest.raises(ValueError, match="not a pairs record"):
        pairs.kept_pairs(str(tmp_path / "cases.json"), ["c1"], "quick", "cpu")


def test_pairs_refuse_a_run_folder_of_another_commit(tmp_path, capsys):
    run = fake_run(tmp_path / "run", commit="0" * 40)
    before = files(run)
    code, err = in_process(capsys, "pairs", "--grid", "quick", "--kind", "c1", "--out", str(run), "--budget", "1")
    assert code == 2 and "holds a run of commit 00000000" in err
    assert files(run) == before


def test_a_pairs_record_of_another_commit_is_not_shown_as_the_runs(tmp_path, capsys):
    run = tmp_path / "run"
    os.makedirs(run)
    records.write_json_atomic(str(run / "machine.json"), {"machine": {}, "gemm_peaks": {}, "commit": "a" * 40,
                                                         "name": "vm"})
    records.write_json_atomic(str(run / "pairs-cpu.json"), {"kind": "pairs", "commit": "b" * 40, "pairs": []})
    assert tidy.load_pairs([str(run)]) == []
    assert "measured at commit bbbbbbbb, not the run folder's aaaaaaaa" in capsys.readouterr().err



def test_a_machine_label_names_a_folder_under_results_and_nothing_else(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for bad in ("../../etc", "a/b", ".hidden", ""):
        code, err = in_process(capsys, *MEASURE_ONLY, "--grid", "quick", "--machine", bad, "--no-progress")
        assert code == 2 and "is not a machine label" in err, (bad, err)
    assert os.listdir(tmp_path) == []  # nothing written anywhere


def test_a_symlink_loop_or_a_file_as_a_folder_is_named(tmp_path, capsys):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    code, err = in_process(capsys, *MEASURE_ONLY, "--grid", "quick", "--out", str(loop), "--no-progress")
    assert code == 2 and "is a symbolic link" in err and "does not resolve" in err
    afile = tmp_path / "f"
    afile.write_text("mine")
    code, err = in_process(capsys, "pairs", "--grid", "quick", "--out", str(afile), "--budget", "1")
    assert code == 2 and f"--out {str(afile)!r} is a file" in err and afile.read_text() == "mine"
