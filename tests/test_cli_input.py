"""Bad command-line values are refused before anything runs, naming the value and what is allowed, and
replace nothing already measured."""

from __future__ import annotations

import json
import os

import pytest
import torch
from run_helpers import MEASURE_ONLY, PLAN, cli, in_process, measure, measured_run

from attention_bench.cli import main as attention_bench
from benchmarks.core.running import runner
from reports import html, tidy
from reports.analyses import c1_length, c3_heads

#: the main job, and its measuring alone
RUNS = [("run",), MEASURE_ONLY]


@pytest.mark.slow
def test_min_run_time_nan_in_a_real_subprocess(tmp_path):
    done = cli("run", "--min-run-time", "nan", "--out", str(tmp_path / "run"), "--no-progress")
    assert done.returncode == 2 and "--min-run-time: must be a finite number of seconds > 0, got 'nan'" in done.stderr
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "abc"])
@pytest.mark.parametrize("command", RUNS)
def test_min_run_time_must_be_a_finite_positive_number(tmp_path, capsys, value, command):
    code, err = in_process(capsys, *command, f"--min-run-time={value}", "--out", str(tmp_path / "run"),
                           "--no-progress")
    assert code == 2 and "--min-run-time" in err and value in err
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("value, allowed", [(v, ">= 1") for v in ("0", "-3", "2.5", "five")]
                         # bounded, instead of running until killed: each round is a pass over the grid
                         + [(v, "from 1 to 100") for v in ("101", "99999999999999999999")])
@pytest.mark.parametrize("command", RUNS)
def test_rounds_must_be_a_whole_number_from_1_to_100(tmp_path, capsys, value, allowed, command):
    code, err = in_process(capsys, *command, f"--rounds={value}", "--out", str(tmp_path / "run"), "--no-progress")
    assert code == 2 and f"--rounds: must be a whole number {allowed}, got {value!r}" in err
    assert not os.path.exists(tmp_path / "run")


def test_the_python_api_bounds_rounds_too(tmp_path):
    with pytest.raises(ValueError, match="rounds must be a whole number from 1 to 100, got 101"):
        runner.Runner(str(tmp_path / "api"), rounds=101)


def test_python_api_refuses_nan_seconds(tmp_path):
    with pytest.raises(ValueError, match="min_run_time must be a finite number of seconds > 0, got nan"):
        runner.Runner(str(tmp_path), min_run_time=float("nan"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", RUNS)
def test_asking_for_a_missing_gpu_is_an_error_that_replaces_nothing(tmp_path, command, capsys):
    report = tmp_path / "report"
    report.mkdir()
    (report / "index.html").write_text("a good report")
    (report / "report.json").write_text(json.dumps({k: [] for k in html.REPORT_FIELDS}))  # one this command wrote
    code, err = in_process(capsys, *command, "--device", "cuda", "--out", str(tmp_path / "run"), "--report",
                           str(report), "--no-progress")
    assert code == 2 and "no CUDA device" in err and "allowed here: cpu" in err
    assert (report / "index.html").read_text() == "a good report" and not os.path.exists(tmp_path / "run")


def test_a_report_of_nothing_measured_is_refused(tmp_path, fake_peaks, capsys):
    cuda_only = [("attention", {"seq_len": 128, "d_head": 64, "backend": "math", "causal": False, "dtype": "float32",
                                "device": "cuda"})]
    run = measure(tmp_path / "run", cuda_only)
    report = tmp_path / "report"
    report.mkdir()
    (report / "index.html").write_text("a good report")
    (report / "report.json").write_text(json.dumps({k: [] for k in html.REPORT_FIELDS}))  # one this command wrote
    if torch.cuda.is_available():
        pytest.skip("the CUDA case runs here")
    assert attention_bench(["report", run, "--report", str(report)]) == 2
    err = capsys.readouterr().err
    assert "no case was measured" in err and "skipped" in err and "left as it is" in err
    assert (report / "index.html").read_text() == "a good report"


@pytest.mark.slow
def test_replacing_a_report_says_what_it_replaced(tmp_path, fake_peaks, capsys):
    run = measure(tmp_path / "run")
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    assert "replaced" not in capsys.readouterr().err
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert f"replaced the report in {tmp_path / 'r'}" in err and run in err


@pytest.mark.parametrize("make_bad", [
    lambda p: p.write_text("a file") and str(p),  # --out is a file
    lambda p: p.write_text("a file") and str(p / "sub"),  # its parent is a file
])
def test_an_output_path_that_cannot_be_a_folder_is_refused_before_measuring(tmp_path, capsys, make_bad):
    bad = make_bad(tmp_path / "taken")
    for command in (*RUNS, ("profile", "--set", "quick")):
        code, err = in_process(capsys, *command, "--out", bad, "--grid", "quick", "--no-progress")
        assert code == 2 and bad in err and "--out" in err, err
    assert (tmp_path / "taken").read_text() == "a file"
    code, err = in_process(capsys, "run", "--report", str(tmp_path / "taken" / "r"), "--out", str(tmp_path / "run"),
                           "--no-progress")
    assert code == 2 and "--report" in err and not os.path.exists(tmp_path / "run" / "cases")


def test_a_folder_that_cannot_be_written_is_refused(tmp_path, capsys):
    unwritable = "/proc/attention-bench-run"  # not writable, not even by root
    code, err = in_process(capsys, *MEASURE_ONLY, "--out", unwritable, "--no-progress")
    assert code == 2 and f"--out {unwritable!r}: cannot write there" in err


def test_csv_to_a_missing_folder_is_a_clear_error(tmp_path, fake_peaks, capsys):
    run = measured_run(tmp_path / "run")
    assert attention_bench(["csv", run, "--csv", "/nonexistent/dir/x.csv"]) == 2
    assert "the folder '/nonexistent/dir' does not exist" in capsys.readouterr().err
    assert attention_bench(["csv", run, "--csv", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_no_results_tells_not_run_from_all_skipped(tmp_path, fake_peaks):
    cuda_models = [("models", {**PLAN[0][1], "device": "cuda"})]
    if torch.cuda.is_available():
        pytest.skip("the CUDA case runs here")
    t = tidy.load([measure(tmp_path / "run", cuda_models + [("depth", {"model": "transformer", "preset": "tiny",
                                                                         "mode": "forward", "seq_len": 8})])])
    c1 = c1_length.analyse(t)
    assert "all 3 cases of the models area were run and none was measured" in c1.verdict
    assert "skipped" in c1.verdict and "CUDA" in c1.verdict
    assert c3_heads.analyse(t).verdict == "No multi-head results: the multihead area was not run."


def test_measured_names_a_file_that_is_not_a_saved_record(tmp_path, fake_peaks, capsys):
    run = measured_run(tmp_path / "run", PLAN[:1])
    machine_json = os.path.join(run, "machine.json")
    assert attention_bench(["measured", machine_json]) == 2
    assert f"{machine_json}: not a saved report or script record" in capsys.readouterr().err
    cut = tmp_path / "cut.json"
    cut.write_text('{"analyses": [')
    assert attention_bench(["measured", str(cut)]) == 2
    assert f"{cut}: not a JSON record" in capsys.readouterr().err
