"""GEMM peaks that load cannot fool: one peak per real thread count, calibrated at a run's start and end with
the best kept, and a case faster than its peak raises the peak and is flagged, never published above 1.05."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch
from run_helpers import FAKE_PEAK, measure

from attention_bench.cli import main as attention_bench
from benchmarks.core import records
from benchmarks.core.hardware import machine
from reports import tidy

PLAN = [("multihead", {"heads": 8, "strategy": "batched", "out_proj": True, "device": "cpu"})]


def test_the_default_thread_count_is_one_peak_with_the_same_count_given():
    n = torch.get_num_threads()
    assert machine.peak_key("cpu", "float32", None) == machine.peak_key("cpu", "float32", n) == f"cpu/float32/{n}"
    assert machine.peak_key("cuda", "float16", None) == "cuda/float16/default"


def test_best_peaks_and_bounded_fractions():
    assert machine.best_peaks({"a": 1.0, "b": 5.0}, {"a": 3.0}) == {"a": 3.0, "b": 5.0}
    assert machine.bounded_fraction(104.0, 100.0) == (pytest.approx(1.04), False)
    assert machine.bounded_fraction(140.0, 100.0) == (1.0, True)


def test_a_run_calibrates_again_at_its_end_and_keeps_the_best(tmp_path, monkeypatch):
    told = iter([1e9, 3e11])  # a calibration that read low at the start, a good one at the end
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
        machine.peak_key("cpu", "float32", None): next(told)})
    run = measure(tmp_path / "run", PLAN)
    saved = records.read_json(os.path.join(run, "machine.json"))
    key = machine.peak_key("cpu", "float32", None)
    assert saved["gemm_peaks"] == {key: 3e11} and [c[key] for c in saved["calibrations"]] == [1e9, 3e11]
    t = tidy.load([run])
    fractions = t[t.metric == "fraction_of_peak"]
    assert len(fractions) == 2 and (fractions.value <= machine.PEAK_TOLERANCE).all()


def test_a_case_above_its_peak_raises_the_peak_and_is_flagged_everywhere(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
        machine.peak_key("cpu", "float32", None): 1e8})  # both calibrations read 0.1 GFLOP/s
    run = measure(tmp_path / "run", PLAN)
    t = tidy.load([run])
    fractions = t[t.metric == "fraction_of_peak"]
    assert fractions.value.max() == 1.0 and (fractions.value <= 1.0).all()
    assert fractions.reason.str.contains("the calibrated GEMM peak: the peak was raised").any()
    peak = t[t.metric == "gemm_peak_flops_per_s"].iloc[0]
    best = t[t.metric == "achieved_flops_per_s"].value.max()
    assert peak.value == best and "raised from the calibrated 0.1 GFLOP/s" in peak.reason
    assert "calibration read low" in peak.reason
    assert attention_bench(["csv", run, "--csv", str(tmp_path / "t.csv")]) == 0

    csv = pd.read_csv(tmp_path / "t.csv")
    assert csv[csv.metric == "fraction_of_peak"].value.max() == 1.0  # the CSV is the same table


@pytest.mark.slow
def test_a_calibration_made_under_load_publishes_no_fraction_of_peak_above_1_05(tmp_path, monkeypatch):
    real, spinners = machine.calibrate, []
    spin = "import time\nprint('spinning', flush=True)\nstop = time.time() + 30\nwhile time.time() < stop: pass"

    def loaded(threads=(), fresh=False):
        if not spinners:  # the first calibration: four processes per core spin meanwhile
            spinners.extend(subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE, text=True)
                            for _ in range(4 * (os.cpu_count() or 1)))
            for s in spinners:  # every one of them spinning before the calibration starts
                assert s.stdout.readline().strip() == "spinning"
            try:  # measured now, under load (not an earlier test's peak from gemm_peak's cache)
                return real(threads, fresh=True)
            finally:
                for s in spinners:
                    s.kill()
                    s.wait()
        return real(threads, fresh)

    monkeypatch.setattr(machine, "calibrate", loaded)
    run = measure(tmp_path / "run", PLAN)
    calibrations = records.read_json(os.path.join(run, "machine.json"))["calibrations"]
    key = machine.peak_key("cpu", "float32", None)
    assert calibrations[0][key] < calibrations[1][key]  # the loaded one read low
    t = tidy.load([run])
    assert (t[t.metric == "fraction_of_peak"].value <= machine.PEAK_TOLERANCE).all()


def test_an_impossible_record_is_not_counted_and_raises_no_peak(tmp_path, fake_peaks, capsys):
    run = measure(tmp_path / "run", PLAN)
    path = next(p for p in sorted(glob.glob(os.path.join(run, "cases", "*.json")))
                if records.read_json(p).get("fraction_of_peak") is not None)
    rec = records.read_json(path)
    factor = 1e4  # self-consistent: FLOPs and every rate scaled alike, 1e4x past any rate this machine showed
    rec.update(matmul_flops=rec["matmul_flops"] * factor, achieved_flops_per_s=rec["achieved_flops_per_s"] * factor,
               fraction_of_peak=rec["fraction_of_peak"] * factor)
    assert records.problem(rec) is None
    records.write_json_atomic(path, rec)
    t = tidy.load([run])
    bad = t[(t.metric == "time") & (t.status == "invalid")]
    assert len(bad) == 1 and "an impossible record" in bad.reason.iloc[0]
    assert records.case_key(rec["area"], rec["method"], rec["params"]) in bad.reason.iloc[0]
    peaks = t[t.metric == "gemm_peak_flops_per_s"]
    assert (peaks.value == FAKE_PEAK).all() and peaks.reason.isna().all()  # no peak raised by it
    assert (t[t.metric == "fraction_of_peak"].value <= machine.PEAK_TOLERANCE).all()
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    assert "an impossible record" in open(tmp_path / "r" / "index.html").read()


def test_a_raised_peak_is_said_on_the_page_with_its_calibration(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
        machine.peak_key("cpu", "float32", t): 1e8 for t in (None, *threads)})
    run = measure(tmp_path / "run", PLAN)
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    page = open(tmp_path / "r" / "index.html").read()
    assert "Read with care:" in page and "raised from the calibrated 0.1 GFLOP/s" in page


def test_a_peak_states_where_a_reruns_calibration_lands_from_the_runs_calibrations():
    from reports import peaks

    two, one = "cpu/float32/2", "cpu/float32/1"
    steady = {"gemm_peaks": {two: 2.1e11, one: 1.1e11},
              "calibrations": [{two: 2.0e11, one: 1.08e11}, {two: 2.1e11, one: 1.1e11}]}
    low, high = peaks.peak_interval(steady, two, 2.1e11)
    assert low < 2.0e11 < 2.1e11 < high
    shaky = {**steady, "calibrations": [{two: 1.5e11, one: 0.8e11}, {two: 2.1e11, one: 1.1e11}]}
    assert peaks.peak_interval(shaky, two, 2.1e11)[0] < low  # calibrations further apart: a wider interval
    assert peaks.peak_interval({**steady, "calibrations": steady["calibrations"][:1]}, two, 2.1e11) is None
