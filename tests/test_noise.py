"""Noise: each CPU time's interleaved control and normalised time, rounds normalised round by round, a busy
machine warned about."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import pandas as pd
import pytest
from run_helpers import PLAN, measure, measured_run

from attention_bench.cli import main as attention_bench
from benchmarks.core import records
from benchmarks.core.hardware import machine
from benchmarks.core.timing import measure as measure_
from reports import tidy
from reports.analyses import noise
from reports.analyses import runs as run_list

# -- noise: interleaved control, normalised times, busy machine, noisy cases --------------------

def test_every_cpu_time_has_its_control_and_a_normalised_time(tmp_path, fake_peaks):

    a, b = measured_run(tmp_path / "a"), measure(tmp_path / "b")
    recs = [records.read_json(str(p)) for p in (tmp_path / "a" / "cases").iterdir()]
    timed = [r for r in recs if r["status"] == "ok" and "time_median_s" in r]
    assert timed and all(r["control_flops_per_s"] > 0 and r["load_average"] is not None for r in timed)
    t = tidy.load([a, b])
    raw, norm = (t[(t.metric == m) & (t.run == os.path.normpath(a))].set_index(["area", "method", "model"]).value
                 for m in ("time", "time_normalised"))
    assert len(raw) == len(norm) and set(raw.index) == set(norm.index)
    assert (norm / raw[norm.index]).between(0.1, 10).all()
    agree = noise.agreement(t, os.path.normpath(a), os.path.normpath(b))
    assert set(agree.index) <= {"time", "time_normalised"} and (agree.worst_gap >= agree.median_gap).all()


def test_a_run_in_rounds_is_normalised_round_by_round_and_keeps_its_best_round(tmp_path):
    """30 cases timed in 2 interleaved rounds. In round 1 the machine's speed flips from case to case (control
    100 then 50 GFLOP/s, the case taking 1 s then 2 s); in round 2 it runs at half speed throughout (50, 2 s).
    Each round scaled by its own control to the run's typical control (50), every case takes 2 s: the
    flips are gone, which a median over neighbouring controls (75 in round 1) would have smeared, and so
    would a control for the record as a whole. The raw time is the median of the rounds; the best round is
    the faster one."""
    from benchmarks.core.timing.measure import combined

    (tmp_path / "cases").mkdir()
    records.write_json_atomic(str(tmp_path / "machine.json"), {
        "machine": {**machine.metadata(), "hostname": "vm"}, "gemm_peaks": {}, "commit": "a" * 40, "name": "vm"})
    at = lambda s: f"2026-12-04T08:{s // 60:02d}:{s % 60:02d}+00:00"  # noqa: E731
    one = lambda start, t, control: {"started_at": at(start), "median_s": t, "q25_s": t, "q75_s": t, "blocks": 1,  # noqa: E731
                                     "calls_per_block": 1, "control_flops_per_s": control}
    for i in range(30):
        fast = i % 2 == 0
        rounds = [one(i, 1.0 if fast else 2.0, 100e9 if fast else 50e9), one(100 + i, 2.0, 50e9)]
        params = {"heads": i + 1, "strategy": "sdpa", "out_proj": True, "device": "cpu"}
        path = tmp_path / "cases" / (records.case_key("multihead", "forward", params) + ".json")
        records.write_json_atomic(str(path), {
            "area": "multihead", "method": "forward", "params": params, "status": "ok", "reason": None,
            "commit": "a" * 40, "started_at": at(i), "threads": 2, **combined(rounds)})
    t = tidy.load([str(tmp_path)]).sort_values("heads")
    value = lambda metric: t[t.metric == metric].value.tolist()  # noqa: E731
    assert value("time") == [1.5, 2.0] * 15
    assert value("time_normalised") == pytest.approx([2.0] * 30)
    assert value("time_best_round") == [1.0, 2.0] * 15
    span = run_list.table(t).iloc[0]  # the run lasted until its last round, not its first
    assert (span["first"], span["last"]) == (pd.Timestamp(at(0)), pd.Timestamp(at(129)))
    assert set(noise.AGREEMENT_METRICS) >= {"time", "time_normalised", "time_best_round"}


def test_a_case_timed_while_the_machine_drifted_is_normalised_process_by_process_and_c2_reads_that(tmp_path):
    """Equation (1)'s math backend timed in three processes while the host ran at 100, 50 and 67 GFLOP/s (the
    control GEMM around each), the sdpa backend while it ran at 100 throughout. The raw math times (1, 2, 1.5 s)
    spread 2x; what the case did at the machine's speed does not. Normalised to the run's typical speed (100),
    each math process took 1 s: the interval is the case's own, and C2's fraction of the peak is the normalised
    rate's (1.5 GFLOP/s of 4, not the raw median's 1), with the sentence saying so."""
    from benchmarks.core.timing.measure import combined
    from reports.analyses import c2_roofline

    (tmp_path / "cases").mkdir()
    records.write_json_atomic(str(tmp_path / "machine.json"), {
        "machine": {**machine.metadata(), "hostname": "vm"}, "gemm_peaks": {"cpu/float32/2": 4e9},
        "commit": "a" * 40, "name": "vm"})
    at = lambda s: f"2026-12-04T08:00:{s:02d}+00:00"  # noqa: E731
    for backend, timed in (("math", ((1.0, 100e9), (2.0, 50e9), (1.5, 100e9 / 1.5))),
                           ("sdpa", ((0.5, 100e9), (0.5, 100e9), (0.5, 100e9)))):
        rounds = [{"started_at": at(i), "pid": i + 1, "median_s": t, "q25_s": t, "q75_s": t, "blocks": 3,
                   "calls_per_block": 1, "control_flops_per_s": c} for i, (t, c) in enumerate(timed)]
        params = {"seq_len": 128, "d_head": 64, "backend": backend, "causal": False, "dtype": "float32",
                  "device": "cpu"}
        record = {"area": "attention", "method": "forward", "params": params, "status": "ok", "reason": None,
                  "commit": "a" * 40, "started_at": at(0), "threads": 2, "matmul_flops": 1.5e9, **combined(rounds)}
        record["achieved_flops_per_s"] = 1.5e9 / record["time_median_s"]
        records.write_json_atomic(
            str(tmp_path / "cases" / (records.case_key("attention", "forward", params) + ".json")), record)
    t = tidy.load([str(tmp_path)])
    row = lambda metric, backend: t[(t.metric == metric) & (t.backend == backend)].iloc[0]  # noqa: E731
    raw, norm = row("time", "math"), row("time_normalised", "math")
    assert raw.value == 1.5 and (raw.lowest, raw.highest) == (1.0, 2.0)
    assert norm.value == pytest.approx(1.0) and (norm.lowest, norm.highest) == (pytest.approx(1.0), pytest.approx(1.0))
    assert norm.high / norm.low < raw.high / raw.low
    assert row("achieved_flops_per_s_normalised", "math").value == pytest.approx(1.5e9)
    a = c2_roofline.analyse(t)
    assert a.numbers["best_fraction_cpu_math"] == pytest.approx(0.375)  # raw: 1 GFLOP/s, 0.25
    assert a.numbers["best_fraction_cpu_sdpa"] == pytest.approx(0.75)
    assert "each process's rate at the run's typical speed" in a.verdict


def test_a_busy_machine_is_warned_about_before_the_run(tmp_path, fake_peaks, monkeypatch, capsys):
    assert 0 <= machine.cpu_busy(0.2) <= 1
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setattr(machine, "cpu_busy", lambda seconds=0.5: 0.93)
    measure(tmp_path / "run", PLAN[:1])
    assert "already busy (other processes use 93% of its 1 cores)" in capsys.readouterr().err


@pytest.mark.slow
def test_the_busy_check_sees_other_processes_spinning():
    spin = "import time\nstop = time.time() + 1.5\nwhile time.time() < stop: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    time.sleep(0.3)  # started: a real busy machine, from other processes (this one's own use is not counted)
    measured = machine.cpu_busy(0.5)
    for s in spinners:
        s.wait()
    assert measured > 0.5  # every core spun by another process


def test_normalised_times_follow_the_machines_drift_not_one_noisy_control():
    base = {"source": "runner", "run": "r", "machine": "vm", "commit": None}

    def record(i, control):
        return {"area": "models", "method": "forward", "params": {"seq_len": i}, "status": "ok", "reason": None,
                "started_at": f"2026-12-04T{i // 60:02d}:{i % 60:02d}:00", "threads": 2, "time_median_s": 1.0,
                "time_q25_s": 1.0, "time_q75_s": 1.0, "time_iqr_s": 0.0, "control_flops_per_s": control}

    # the machine runs at full speed (100) for 40 cases, then at half speed (50) for 40: a slow drift,
    # with one control that misread (5) in the middle of the fast half
    controls = [100.0] * 40 + [50.0] * 40
    controls[20] = 5.0
    rows = tidy._normalised([record(i, c) for i, c in enumerate(controls)], base)
    factor = {r["seq_len"]: r["value"] for r in rows}
    typical = statistics.median(controls)  # the run's typical speed
    assert factor[5] == pytest.approx(100 / typical) and factor[70] == pytest.approx(50 / typical)
    assert factor[20] == pytest.approx(100 / typical)  # the misread control is outvoted by its neighbours


def test_a_run_cut_short_before_its_rounds_is_labelled_incomplete_on_the_page(tmp_path, fake_peaks, monkeypatch):
    real, calls = measure_.measure, []

    def cut(case, method, **kw):
        calls.append(method)
        if len(calls) == 8:  # in the second of three rounds: some methods have 2 rounds, some 1
            raise KeyboardInterrupt
        return real(case, method, **kw)

    monkeypatch.setattr(measure_, "measure", cut)
    with pytest.raises(KeyboardInterrupt):
        measure(tmp_path / "run", rounds=3)
    monkeypatch.undo()
    t = tidy.load([str(tmp_path / "run")])
    run = run_list.table(t).iloc[0]
    assert run.rounds_planned == 3 and run.incomplete == 6 and run.rounds == 2
    assert attention_bench(["report", str(tmp_path / "run"), "--report", str(tmp_path / "r")]) == 0
    page = open(tmp_path / "r" / "index.html").read()
    assert "6 timed cases have fewer rounds than the 3 planned: the run was cut short" in page


def test_a_busy_machine_is_said_on_the_page_per_run_and_per_case(tmp_path, fake_peaks, monkeypatch):
    shares = iter([0.9, 0.1] * 10)
    monkeypatch.setattr(measure_, "others_cpu_share", lambda before, after: next(shares))
    run = measure(tmp_path / "run")
    t = tidy.load([run])
    assert sorted(t[t.metric == "others_cpu_share"].value) == [0.1, 0.1, 0.1, 0.9, 0.9, 0.9]
    listed = run_list.table(t).iloc[0]
    assert listed.busy_cases == 3 and listed.others_cpu == "median 50%, max 90%"
    assert len(noise.busy_cases(t)) == 3 and (noise.busy_cases(t).others_cpu_share == 0.9).all()
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    page = open(tmp_path / "r" / "index.html").read()
    assert "was measured on a busy machine: other processes used more than 50% of the cores while 3 of" in page
    assert "Cases timed on a busy machine" in page


def test_the_runs_table_says_how_fast_the_host_let_each_runs_cores_go():
    """The control GEMM's median rate over a run's CPU cases, per thread count: a host that ran something else on
    the cores reads lower, which the share of the cores other processes used does not show inside a VM."""
    rows = [{"source": "runner", "run": run, "machine": "vm", "area": "attention", "method": "forward",
             "metric": "control_flops_per_s", "unit": "FLOP/s", "value": v, "status": "ok", "threads": n,
             "date": pd.Timestamp("2026-12-07", tz="UTC"), "finished": pd.Timestamp("2026-12-07", tz="UTC")}
            for run, n, values in (("quiet", 1, [100e9, 101e9, 99e9]), ("quiet", 2, [190e9, 194e9]),
                                   ("shared", 2, [160e9, 120e9, 170e9]))
            for v in values]
    listed = run_list.table(pd.DataFrame(rows, columns=tidy.COLUMNS)).control_gemm
    assert listed["quiet"] == "100 GFLOP/s on 1 thread, 192 GFLOP/s on 2 threads"
    assert listed["shared"] == "160 GFLOP/s on 2 threads"
