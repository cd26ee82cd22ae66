"""The in-process runner: records per case, atomic writes, resume, and failures recorded, not fatal."""

import json
import mmap
import os
import resource

import pytest
import torch
from run_helpers import FAKE_PEAK

from benchmarks import cases
from benchmarks.core import records
from benchmarks.core.hardware import machine
from benchmarks.core.records import case_key
from benchmarks.core.running import runner
from benchmarks.core.timing import measure
from transformer import flops

PLAN = [
    ("multihead", {"heads": 8, "strategy": "batched", "out_proj": True, "device": "cpu"}),
    ("models", {"model": "transformer", "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"}),
    ("threads", {"workload": "attention", "threads": 1}),
    ("attention", {"seq_len": 128, "d_head": 64, "backend": "math", "causal": False, "dtype": "float32",
                   "device": "cuda"}),
]
PEAK = FAKE_PEAK


@pytest.fixture(autouse=True)
def fake_peaks(monkeypatch):
    """Calibration is tested in test_benchmarks; here a known peak makes fractions checkable."""
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
        machine.peak_key("cpu", "float32", t): PEAK for t in (None, *threads)})


@pytest.fixture(autouse=True)
def small_cases(monkeypatch):
    """The runner's logic on fewer tokens: the multihead and attention cases at a fraction of the grid's shapes."""
    monkeypatch.setitem(cases.MULTIHEAD_SHAPE, "seq_len", 32)
    monkeypatch.setitem(cases.TOKENS, "cpu", 1024)


def written(out):
    folder = os.path.join(out, "cases")
    return {f: json.load(open(os.path.join(folder, f))) for f in sorted(os.listdir(folder))}


def test_records_every_method_with_consistent_metrics(tmp_path):
    counts = runner.Runner(str(tmp_path), min_run_time=0.01).run(PLAN, progress=False)
    recs = written(tmp_path)
    assert len(recs) == 2 + 3 + 1 + 1  # multihead: forward, train_step; models: + generate
    assert counts["ok"] == 6 + (1 if torch.cuda.is_available() else 0)
    assert not [f for f in os.listdir(tmp_path / "cases") if not f.endswith(".json")]  # no temp files left
    for r in recs.values():
        if r["status"] != "ok":
            assert r["params"]["device"] == "cuda" and "no CUDA device" in r["reason"]
            continue
        assert r["time_q25_s"] <= r["time_median_s"] <= r["time_q75_s"]
        assert r["time_iqr_s"] == pytest.approx(r["time_q75_s"] - r["time_q25_s"])
        assert r["samples"] == r["blocks"] == r["rounds"][0]["blocks"]  # one round: its quartiles are over its blocks
        assert r["achieved_flops_per_s"] == pytest.approx(r["matmul_flops"] / r["time_median_s"])
        assert r["fraction_of_peak"] == pytest.approx(r["achieved_flops_per_s"] / PEAK)
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["time_median_s"])
    train = recs[case_key("multihead", "train_step", PLAN[0][1]) + ".json"]
    forward = recs[case_key("multihead", "forward", PLAN[0][1]) + ".json"]
    shape = cases.MULTIHEAD_SHAPE
    expected = flops.multi_head_attention(shape["batch"], shape["seq_len"], shape["d_model"], 8, strategy="batched")
    assert (forward["matmul_flops"], train["matmul_flops"]) == (expected.forward.matmul_total,
                                                                 expected.train.matmul_total)
    assert recs[case_key("threads", "forward", PLAN[2][1]) + ".json"]["threads"] == 1
    meta = json.load(open(tmp_path / "machine.json"))
    assert meta["machine"]["cpu_count"] == os.cpu_count() and meta["gemm_peaks"]["cpu/float32/1"] == PEAK


def test_resume_skips_recorded_cases_and_finishes_an_interrupted_run(tmp_path, monkeypatch):
    real, calls = measure.measure, []

    def interrupted(case, method, **kw):
        calls.append(method)
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the second case
        return real(case, method, **kw)

    monkeypatch.setattr(measure, "measure", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.Runner(str(tmp_path), min_run_time=0.01).run(PLAN[:2], progress=False)
    assert len(written(tmp_path)) == 2  # the first case survived whole
    monkeypatch.setattr(measure, "measure", real)
    counts = runner.Runner(str(tmp_path), min_run_time=0.01).run(PLAN[:2], progress=False)
    assert counts["resumed"] == 1 and counts["ok"] == 3 and len(written(tmp_path)) == 5
    again = runner.Runner(str(tmp_path), min_run_time=0.01).run(PLAN[:2], progress=False)
    assert again["resumed"] == 2 and again["ok"] == 0
    monkeypatch.setattr(runner, "commit", lambda: "f" * 40)  # the code changed: measure again
    newer = runner.Runner(str(tmp_path), min_run_time=0.01).run(PLAN[:2], progress=False)
    assert newer["resumed"] == 0 and newer["ok"] == 5


def test_out_of_memory_and_errors_are_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    real = cases.build

    def build(area, params):
        if area == "multihead":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        if area == "models":
            raise ZeroDivisionError("broken model")
        return real(area, params)

    monkeypatch.setattr(cases, "build", build)
    counts = runner.Runner(str(tmp_path), min_run_time=0.01).run(PLAN[:3], progress=False)
    assert counts["oom"] == 2 and counts["failed"] == 3 and counts["ok"] == 1
    recs = written(tmp_path)
    oom = recs[case_key("multihead", "forward", PLAN[0][1]) + ".json"]
    assert oom["status"] == "oom" and "80.00 GiB" in oom["reason"]
    failed = recs[case_key("models", "generate", PLAN[1][1]) + ".json"]
    assert failed["status"] == "failed" and "ZeroDivisionError: broken model" in failed["reason"]


def test_rounds_are_interleaved_over_the_run_and_combined_in_each_record(tmp_path, monkeypatch):
    plan = [PLAN[0], PLAN[2], PLAN[3]]  # two CPU cases, three timed methods, and a CUDA case (skipped here)
    real, built = cases.build, []
    monkeypatch.setattr(cases, "build", lambda area, params: built.append(area) or real(area, params))
    runner.Runner(str(tmp_path / "one"), min_run_time=0.01).run(plan, progress=False)
    once = sorted(built)
    built.clear()
    r = runner.Runner(str(tmp_path), min_run_time=0.03, rounds=3)
    counts = r.run(plan, progress=False)
    assert sorted(built) == once  # each case built once for all its rounds, as in a run of one round
    recs = written(tmp_path)
    timed = {k: v for k, v in recs.items() if v["status"] == "ok"}
    assert counts["ok"] == len(timed) == 3 + (1 if torch.cuda.is_available() else 0)
    assert len(r.records) == len(recs)  # one final record per method, not one per round
    for rec in timed.values():
        medians = [x["median_s"] for x in rec["rounds"]]
        assert len(medians) == 3 and rec["rounds_planned"] == 3
        assert rec["time_median_s"] == pytest.approx(sorted(medians)[1])
        assert rec["time_best_round_s"] == min(medians)
        assert rec["achieved_flops_per_s"] == pytest.approx(rec["matmul_flops"] / rec["time_median_s"])
        assert rec["blocks"] == sum(x["blocks"] for x in rec["rounds"])
        # the spread is the one between rounds, minutes apart on a real run, not inside one round
        assert rec["samples"] == 3 and rec["time_q25_s"] == pytest.approx((sorted(medians)[0] + sorted(medians)[1]) / 2)
        assert rec["time_q75_s"] == pytest.approx((sorted(medians)[1] + sorted(medians)[2]) / 2)
    # round by round over the whole grid: every method's round k starts before any method's round k + 1
    starts = sorted((x["started_at"], i) for rec in timed.values() for i, x in enumerate(rec["rounds"]))
    assert [i for _, i in starts] == [0] * 3 + [1] * 3 + [2] * 3


def test_an_interrupted_run_in_rounds_resumes_at_the_round_it_stopped(tmp_path, monkeypatch):
    plan = [PLAN[0], PLAN[2]]
    real, calls = measure.measure, []

    def interrupted(case, method, **kw):
        calls.append(method)
        if len(calls) == 5:
            raise KeyboardInterrupt  # Ctrl-C in the second round
        return real(case, method, **kw)

    monkeypatch.setattr(measure, "measure", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.Runner(str(tmp_path), min_run_time=0.03, rounds=3).run(plan, progress=False)
    before = written(tmp_path)
    assert sorted(len(r["rounds"]) for r in before.values()) == [1, 1, 2]  # whole records, rounds so far
    monkeypatch.setattr(measure, "measure", real)
    counts = runner.Runner(str(tmp_path), min_run_time=0.03, rounds=3).run(plan, progress=False)
    assert counts["ok"] == 3 and counts["resumed"] == 0
    after = written(tmp_path)
    for key, rec in after.items():  # the rounds measured before the interruption are kept, not measured again
        assert len(rec["rounds"]) == 3 and rec["rounds"][:len(before[key]["rounds"])] == before[key]["rounds"]
        assert rec["started_at"] == before[key]["started_at"]
    assert runner.Runner(str(tmp_path), min_run_time=0.03, rounds=3).run(plan, progress=False)["resumed"] == 2
    # a run with another number of rounds measures every case again, from its first round
    counts = runner.Runner(str(tmp_path), min_run_time=0.03, rounds=2).run(plan, progress=False)
    assert counts["resumed"] == 0 and all(len(r["rounds"]) == 2 for r in written(tmp_path).values())


def test_bad_input_names_the_value_and_what_is_allowed(tmp_path):
    with pytest.raises(ValueError, match="unknown grid 'huge'.*quick"):
        runner.plan("huge")
    with pytest.raises(ValueError, match="unknown area 'rnn'.*attention"):
        runner.plan("quick", ["rnn"])
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        runner.plan("quick", None, ["tpu"])
    with pytest.raises(ValueError, match="min_run_time must be a finite number of seconds > 0, got -1"):
        runner.Runner(str(tmp_path), min_run_time=-1)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=f"rounds must be a whole number from 1 to 100, got {bad!r}"):
            runner.Runner(str(tmp_path), rounds=bad)
    assert {p.get("device", "cpu") for _, p in runner.plan("quick", None, ["cpu"])} == {"cpu"}


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = str(tmp_path / "r.json")
    records.write_json_atomic(path, {"a": 1})
    monkeypatch.setattr(json, "dump", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        records.write_json_atomic(path, {"a": 2})
    assert json.load(open(path)) == {"a": 1} and os.listdir(tmp_path) == ["r.json"]


def test_a_timing_short_of_three_blocks_is_topped_up_only_when_that_is_cheap():
    import time

    topped = measure.blocked_timing(lambda: time.sleep(0.03), min_run_time=0.05)  # 2 blocks, a third costs 0.03 s
    assert topped.blocks == measure.MIN_SAMPLES == 3 and topped.calls_per_block == 1
    assert 0.03 <= topped.q25 <= topped.median <= topped.q75 < 0.06
    slow = measure.blocked_timing(lambda: time.sleep(0.1), min_run_time=0.05)  # two more would cost 0.2 s: left as is
    assert slow.blocks == 1 and slow.q25 == slow.median == slow.q75


def test_a_grid_may_leave_a_method_of_a_case_out_and_the_runner_times_only_the_rest(tmp_path):
    params = {"model": "transformer", "preset": "paper-base", "seq_len": 128, "batch": 8, "device": "cpu"}
    default = runner.Runner(str(tmp_path / "default"), grid="default")
    assert default.methods("models", params) == [m for m in cases.METHODS["models"] if m != "train_step"]
    assert default.methods("models", {**params, "seq_len": 64}) == default.methods("models", params)
    assert "train_step" in default.methods("models", {**params, "preset": "tiny"})
    assert runner.Runner(str(tmp_path / "full"), grid="full").methods("models", params) == list(cases.METHODS["models"])
    assert runner.Runner(str(tmp_path / "any")).methods("models", params) == list(cases.METHODS["models"])


def test_the_quick_grid_times_the_heads_forward_pass_only(tmp_path):
    params = {"heads": 8, "strategy": "batched", "out_proj": True, "device": "cpu"}
    assert runner.Runner(str(tmp_path / "quick"), grid="quick").methods("multihead", params) == ["forward"]
    assert runner.Runner(str(tmp_path / "default"), grid="default").methods("multihead", params) == [
        "forward", "train_step"]


def test_a_timings_page_faults_are_per_call_over_every_call_it_ran_its_warm_ups_included():
    import time

    for seconds, min_run_time in ((0.0, 0.01), (0.0005, 0.02), (0.03, 0.05), (0.1, 0.05)):  # blocks of 1 to 1000s
        calls = [0]

        def fn(calls=calls, seconds=seconds):
            calls[0] += 1
            time.sleep(seconds)

        timing = measure.blocked_timing(fn, min_run_time)
        assert timing.calls + timing.untimed == calls[0], (seconds, timing)  # torch's warm-ups, counted exactly
    page = resource.getpagesize()  # a call that faults 64 fresh pages in every time: 64 a call

    def faulting():
        with mmap.mmap(-1, 64 * page) as m:
            for p in range(64):
                m[p * page] = 1

    one = measure.timed_round(faulting, "cpu", min_run_time=0.001)
    assert 60 <= one["faults_per_call"] <= 70, one
