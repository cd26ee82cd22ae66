"""Claim C2 timed paired (benchmarks.pairs, kind c2): equation (1) against the GEMM in the same moments, the
fraction of the GEMM's rate, the faster memory state where the sessions ran attention in two, and C2's answer."""

from __future__ import annotations

import json
import mmap

import pytest
import torch
from run_helpers import StandInWorker

from attention_bench.cli import main as attention_bench
from benchmarks import cases, pairs
from benchmarks.ceiling import ceiling
from benchmarks.core import records
from benchmarks.core.hardware import machine
from benchmarks.core.pairing import mirrored, mirrored_worker, sessions
from benchmarks.core.timing import measure
from reports.analyses.base import Analysis
from reports.analyses.paired import analyse, reconcile


def test_c2_pairs_each_backend_at_its_lengths_with_the_calibrations_largest_gemm():
    got = pairs.pairs_of("c2", "default", "cpu")
    assert sorted((a["backend"], a["seq_len"]) for (_, a, _), _ in got) == [
        ("math", 128), ("math", 1024), ("sdpa", 128), ("sdpa", 1024)]
    for (area, a, method), gemm in got:
        assert area == "attention" and method == "forward" and not a["causal"] and a["dtype"] == "float32"
        assert gemm == ("gemm", {"size": machine.GEMM_SIZES["cpu"][-1], "dtype": "float32", "device": "cpu"}, "forward")
    assert {a["seq_len"] for (_, a, _), _ in pairs.pairs_of("c2", "quick", "cpu")} == {128}  # those on the grid


def test_the_gemm_case_is_the_calibrations_matmul_with_its_flops():
    case = cases.build("gemm", {"size": 64, "dtype": "float32", "device": "cpu"})
    fn, flops, _ = case.work("forward")
    assert flops.matmul_total == 2 * 64**3 and fn().shape == (64, 64)
    size = machine.GEMM_SIZES["cpu"][-1]  # the tests' calibration is a small one (run_helpers.quick_measuring)
    assert pairs.matmul_flops(("gemm", ceiling("cpu"), "forward")) == 2 * size**3
    with pytest.raises(ValueError, match="unknown area 'gem'; allowed: attention"):
        cases.area("gem")
    assert "gemm" not in cases.GRIDS["default"]  # a case to pair with, not an area the grid times


def test_the_worker_says_the_page_faults_per_call_of_a_block():
    def fresh_pages():  # 1024 pages of a new mapping, each written: faulted in on every call
        with mmap.mmap(-1, 1024 * mmap.PAGESIZE) as m:
            for page in range(1024):
                m[page * mmap.PAGESIZE] = 1

    answer = mirrored_worker.handle({"case": 0, "calls": 3}, [(fresh_pages, None, "cpu")], cases, torch)
    assert answer["seconds"] > 0 and answer["faults"] >= 1024
    assert mirrored_worker.handle({"case": 0, "calls": 3}, [(lambda: None, None, "cpu")], cases, torch)["faults"] < 100


class Sessions(sessions.PairRounds):
    """A c2 pair's rounds as ``pairs.Sessions`` leaves them: each session's ratios (GEMM time over attention time) and
    side a's page faults per call."""

    def __init__(self, per_session: list[tuple[list[float], float]]):
        self.ratios = [[r for rs, _ in per_session for r in rs]]
        self.sessions = [[k for k, (rs, _) in enumerate(per_session) for _ in rs]]
        self.faults = [[{"a": f, "b": 0.0} for rs, f in per_session for _ in rs]]
        self.skipped, self.settled = {}, set()


def test_the_fraction_is_the_ratio_times_the_flops_and_the_faster_memory_state_counts_where_there_are_two():
    flops_a, flops_b = 10**9, 4 * 10**9  # attention does a quarter of the GEMM's work
    steady = Sessions([([2.0, 2.1], 0.0), ([1.9, 2.0], 0.0), ([2.0, 2.05], 0.0)])
    est = steady.estimates()[0]
    got = sessions.fraction_of_gemm(steady, 0, est, flops_a, flops_b)
    assert got["fraction"] == pytest.approx(est.ratio / 4) and "modes" not in got
    assert got["fraction_low"] == pytest.approx(est.low / 4) and got["fraction_sessions"] == [0, 1, 2]
    # session 1 faulted its scores in afresh on every call (the slower memory state): half the rate
    split = Sessions([([2.0, 2.1], 10.0), ([1.0, 1.05], 12000.0), ([2.05, 2.0], 0.0)])
    got = sessions.fraction_of_gemm(split, 0, split.estimates()[0], flops_a, flops_b)
    assert got["fraction_sessions"] == [0, 2] and got["fraction"] == pytest.approx(2.04 / 4, rel=0.02)
    fast, slow = got["modes"]
    assert (fast["sessions"], slow["sessions"]) == (2, 1) and slow["fraction"] == pytest.approx(1.025 / 4, rel=0.02)
    assert got["fraction_low"] <= got["fraction"] <= got["fraction_high"]
    # the same two levels without a fault split are not two memory states: every session counts
    noise = Sessions([([2.0, 2.1], 10.0), ([1.0, 1.05], 20.0), ([2.05, 2.0], 0.0)])
    assert sessions.fraction_of_gemm(noise, 0, noise.estimates()[0], flops_a, flops_b)["fraction_sessions"] == [0, 1, 2]
    assert measure.STATE_PAGES < 12000


def test_a_session_that_faulted_but_ran_near_the_faster_level_stays_in_the_slower_state():
    """Math attention at n = 1024 as a run timed it: session 0 kept its 128 MB of scores, sessions 1 and 2
    faulted them in afresh on every call (31,744 pages), session 2 in a quieter moment. The widest gap in time
    (between sessions 2 and 1) would group session 2 with session 0 and see no memory states, so that every
    session counted and the fraction fell by half; split by their faults, the faster state is session 0's."""
    flops_a, flops_b = 10**9, 2 * 10**9
    run = Sessions([([1.39, 1.40], 0.0), ([0.38, 0.39], 31744.0), ([0.92, 0.93], 31744.0)])
    got = sessions.fraction_of_gemm(run, 0, run.estimates()[0], flops_a, flops_b)
    assert got["fraction_sessions"] == [0] and got["fraction"] == pytest.approx(1.395 / 2, rel=0.01)
    fast, slow = got["modes"]
    assert (fast["sessions"], slow["sessions"]) == (1, 2) and not slow["counted"]
    # as a grid's rounds: the faulting round nearer the fast one is still of the slower state
    rounds = [{"median_s": t, "q25_s": t, "q75_s": t, "blocks": 1, "faults_per_call": f}
              for t, f in ((0.72, 0.0), (2.6, 31744.0), (1.09, 31744.0))]
    assert [(m["processes"], m["faults_per_call"]) for m in measure.modes_of(rounds)] == [(1, 0.0), (2, 31744.0)]
    # a round faulting in some pages each call, fewer than a state's, joins the level its time is nearer
    between = [{**r, "median_s": t, "faults_per_call": f}
               for r, t, f in zip(rounds, (0.87, 0.69, 0.862), (16384.0, 0.0, 2048.0), strict=True)]
    assert [m["processes"] for m in measure.fault_states(between)] == [1, 2]
    nearer_fast = [{**r, "median_s": 0.70} if r["faults_per_call"] == 2048.0 else r for r in between]
    assert [m["processes"] for m in measure.fault_states(nearer_fast)] == [2, 1]
    # faults that split without the faulting side running slower are not two states
    level = [{**r, "median_s": t} for r, t in zip(rounds, (1.0, 1.05, 0.98), strict=True)]
    assert measure.fault_states(level) is None


def c2_pair(backend: str, n: int, fraction: float, low: float, high: float, **more) -> dict:
    return {"kind": "c2", "status": "ok", "params": {"seq_len": n, "d_head": 64, "backend": backend, "causal": False,
                                                      "dtype": "float32", "device": "cpu"},
            "ratio": 1.0, "low": 0.9, "high": 1.1, "rounds": 3, "a_s": 0.01, "b_s": 0.01, "fraction": fraction,
            "fraction_low": low, "fraction_high": high, **more}


def test_c2s_answer_is_the_best_paired_fraction_with_the_grids_checked_against_it():
    c2 = Analysis("c2_roofline", "C2", "C2", "", answer="grid's",
                  numbers={"gemm_peak_cpu": 1.9e11, "best_fraction_cpu_math": 0.47, "best_fraction_cpu_sdpa": 0.60})
    c2.intervals = {"best_fraction_cpu_math": (0.40, 0.55), "best_fraction_cpu_sdpa": (0.55, 0.66)}
    c2.quoted = ["gemm_peak_cpu", "best_fraction_cpu_math", "best_fraction_cpu_sdpa"]
    c1, heads = Analysis("c1_length", "C1", "C1", ""), Analysis("c3_heads", "C3", "C3/C4", "")
    paired = Analysis("paired", "P", "C1/C2/C3", "", answer="paired's")
    states = [{"fraction": 0.49, "sessions": 2, "faults_per_call": 3.0},
              {"fraction": 0.24, "sessions": 1, "faults_per_call": 12000.0}]
    pairs_ = [c2_pair("math", 128, 0.49, 0.45, 0.53, modes=states), c2_pair("math", 1024, 0.30, 0.28, 0.32),
              c2_pair("sdpa", 128, 0.55, 0.5, 0.6), c2_pair("sdpa", 1024, 0.88, 0.84, 0.92)]
    reconcile(c1, heads, paired, [{"device": "cpu", "pairs": pairs_}], c2)
    size = machine.GEMM_SIZES["cpu"][-1]
    assert c2.answer.startswith(f"Best fraction of the GEMM's rate timed beside it (the {size}² GEMM) on cpu: "
                                "math 49% at n = 128 (paired, 95% 45-53%; its faster memory state, 2 of 3 sessions; "
                                "the other was at 24%), sdpa 88% at n = 1024 (paired, 95% 84-92%), but the grid gave "
                                "60% (55-66%) of the calibrated peak, apart from it.")
    assert c2.quoted == ["paired_best_fraction_cpu_math", "paired_best_fraction_cpu_sdpa"]
    assert c2.numbers["paired_best_fraction_cpu_sdpa"] == 0.88
    assert paired.answer.endswith("agree within them for 1 of 2 (not for C2 sdpa).")
    alone = analyse([{"device": "cpu", "pairs": pairs_}])
    assert "math n = 128 49% (45-53%; its faster memory state" in alone.verdict
    assert alone.numbers["c2_sdpa_n1024_cpu"] == 0.88 and "88% (sdpa)" in alone.answer


def test_a_fraction_outside_its_interval_is_not_a_pairs_record():
    bad = {"kind": "pairs", "pairs": [c2_pair("math", 128, 0.6, 0.45, 0.53)]}
    assert "fraction 0.6 outside its interval 0.45-0.53" in records.pairs_problem(bad)
    assert records.pairs_problem({"kind": "pairs", "pairs": [c2_pair("math", 128, 0.5, 0.45, 0.53)]}) is None


def test_the_pairs_command_records_c2s_fractions(tmp_path, monkeypatch):
    class Worker(StandInWorker):  # attention at a quarter of the GEMM's time; the GEMM's faults none
        regime, settle = {"threads": 1, "env": {}}, 0

        def __init__(self, label, *args, **kwargs):
            self.label = label

        def start(self, todo):
            self.todo = todo
            return [None] * len(todo)

        def ask(self, request, timeout=None):
            area = self.todo[mirrored_worker.case_of(request)][0]
            return {"seconds": 0.004 if area == "gemm" else 0.001, "faults": 0.0}

    monkeypatch.setattr(pairs, "Worker", Worker)
    record = tmp_path / "pairs.json"
    assert attention_bench(["pairs", "--grid", "quick", "--kind", "c2", "--record", str(record), "--device", "cpu",
                            "--budget", "0.000001", "--no-progress"]) == 0
    saved = json.loads(record.read_text())
    assert records.pairs_problem(saved) is None and len(saved["pairs"]) == 2
    for p in saved["pairs"]:
        scale = p["flops_a"] / p["flops_b"]
        assert p["ratio"] == pytest.approx(4.0) and p["fraction"] == pytest.approx(4.0 * scale)
        assert p["flops_b"] == 2 * machine.GEMM_SIZES["cpu"][-1] ** 3 and p["round_faults"][0] == {"a": 0.0, "b": 0.0}
    assert [p["params"]["backend"] for p in saved["pairs"]] == ["math", "sdpa"]


def test_the_docs_render_a_c2_pair_with_its_fraction():
    from reports import measured

    saved = {"kind": "pairs", "generated": "2026-12-07T03:00:00+00:00", "commit": "abc", "threads": 2, "rounds": 3,
             "elapsed_s": 40.0, "machine": {"cpu_model": "AMD EPYC", "cpu_count": 2, "torch": "2.13.0+cpu"},
             "pairs": [{**c2_pair("sdpa", 1024, 0.88, 0.84, 0.92), "meaning": pairs.KINDS["c2"][-1], "axis": None,
                        "a": "attention", "b": "gemm"}]}
    block = measured.markdown(saved, "pairs.json")
    assert "| attention: 10.0 ms | gemm: 10.0 ms | 1.000 (88% of the GEMM's rate, 84%-92%) |" in block


def test_a_faster_state_of_one_session_gets_the_interval_of_the_runs_typical_variance():
    one = Sessions([([2.0], 10.0), ([1.0], 12000.0), ([1.05], 11000.0)])
    got = sessions.fraction_of_gemm(one, 0, one.estimates()[0], 1, 4)
    assert got["fraction_sessions"] == [0] and got["fraction"] == pytest.approx(0.5)
    assert 0 < got["fraction_low"] < 0.5 < got["fraction_high"] < 10  # not the (0, inf) of one round's bootstrap


def test_c2s_pairs_run_in_one_worker_with_the_allocator_fixed_c1s_sides_each_in_a_plain_worker_of_its_own(
        tmp_path, monkeypatch):
    made = {}

    class Worker(StandInWorker):  # every block 1 ms; records what each worker was started with and which cases it built
        def __init__(self, label, models, suite, env, settle=0):
            self.label, self.env, self.settle, self.regime = label, env, settle, {"threads": 1, "env": dict(env)}
            self.warmed = []
            made[label] = self

        def start(self, todo):
            self.areas = {area for area, _, _ in todo}
            self.models = {params.get("model") for _, params, _ in todo}
            return [None] * len(todo)

        def ask(self, request, timeout=None):
            if "probe" in request or "warm" in request:
                self.warmed.append(request.get("settle"))
            return {"seconds": 0.001, "faults": 0.0}

    monkeypatch.setattr(pairs, "Worker", Worker)
    record = tmp_path / "pairs.json"
    args = ["pairs", "--grid", "quick", "--kind", "c1", "--kind", "c2", "--record", str(record), "--device", "cpu",
            "--budget", "0.000001", "--no-progress"]
    assert attention_bench(args) == 0
    c1 = [made["c1 transformer"], made["c1 rnn-width"]]  # each side of C1 in a worker of its own: its model alone
    assert [(w.env, w.areas, w.models) for w in c1] == [({}, {"models"}, {m}) for m in ("transformer", "rnn-width")]
    assert made["c2"].env == mirrored.FIXED_ALLOCATOR and made["c2"].areas == {"attention", "gemm"}
    assert {s for w in c1 for s in w.warmed} == {None} and set(made["c2"].warmed) == {pairs.SETTLE_CALLS}  # grown
    saved = json.loads(record.read_text())
    assert saved["regime"] == {"threads": 1, "env": {}} and saved["worker_env"] == {}  # the plain worker's
    assert {p["kind"]: p["worker_env"] for p in saved["pairs"]} == {"c1": {}, "c2": mirrored.FIXED_ALLOCATOR}
    assert {p["kind"]: p["separate_workers"] for p in saved["pairs"]} == {"c1": True, "c2": False}
    said = analyse([saved]).conditions
    assert f"the c2 pairs' worker with glibc's allocator fixed (MALLOC_MMAP_THRESHOLD_={2**32}" in said
    made.clear()  # with --fixed-allocator every kind runs with it, C1's sides still apart
    assert attention_bench([*args, "--fixed-allocator"]) == 0
    assert list(made) == ["c1 transformer", "c1 rnn-width", "c2"]
    assert all(w.env == mirrored.FIXED_ALLOCATOR and set(w.warmed) == {pairs.SETTLE_CALLS} for w in made.values())


def test_c2s_row_names_the_allocator_its_pairs_ran_with_in_its_conditions_and_gives_the_grids_figure_beside():
    c2 = Analysis("c2_roofline", "C2", "C2", "", answer="grid's", numbers={"best_fraction_cpu_math": 0.30})
    c2.intervals, c2.quoted = {"best_fraction_cpu_math": (0.28, 0.32)}, ["best_fraction_cpu_math"]
    fixed = {"worker_env": mirrored.FIXED_ALLOCATOR}
    paired = Analysis("paired", "P", "C1/C2/C3", "", answer="paired's")
    reconcile(Analysis("c1_length", "C1", "C1", ""), Analysis("c3_heads", "C3", "C3/C4", ""), paired,
              [{"device": "cpu", "pairs": [c2_pair("math", 1024, 0.65, 0.6, 0.7, **fixed)]}], c2)
    size = machine.GEMM_SIZES["cpu"][-1]
    assert c2.answer == (f"Best fraction of the GEMM's rate timed beside it (the {size}² GEMM) on cpu: math 65% at "
                         "n = 1024 (paired, 95% 60-70%; the grid, with the default allocator: 30% (28-32%) of the "
                         "calibrated peak).")
    assert c2.conditions.endswith("; the paired fractions, with glibc's allocator fixed")  # the regime: said once
    assert c2.quoted == ["paired_best_fraction_cpu_math"] and paired.answer == "paired's"  # a figure of another
    alone = analyse([{"device": "cpu", "pairs": [c2_pair("math", 1024, 0.65, 0.6, 0.7, **fixed)]}])  # regime
    assert "times their FLOPs, with glibc's allocator fixed): math n = 1024 65% (60-70%)" in alone.verdict


def test_a_settled_warm_up_calls_until_a_call_faults_no_pages_in_and_no_further():
    calls = []

    def growing():  # faults 1024 fresh pages in on each of its first three calls, then none
        calls.append(1)
        if len(calls) <= 3:
            with mmap.mmap(-1, 1024 * mmap.PAGESIZE) as m:
                for page in range(1024):
                    m[page * mmap.PAGESIZE] = 1

    built = [(growing, None, "cpu")]
    mirrored_worker.handle({"warm": 0, "calls": 1, "settle": 8}, built, cases, torch)
    assert len(calls) == 1 + 3  # the warm call, then two more that fault and the one that does not
    mirrored_worker.handle({"warm": 0, "calls": 2, "settle": 8}, built, cases, torch)
    assert len(calls) == 6  # settled: the asked calls only
    calls.clear()
    mirrored_worker.handle({"probe": 0, "settle": 2}, built, cases, torch)
    assert len(calls) == 2 + 1  # two warm-ups at most, then the timed call
    calls.clear()
    mirrored_worker.handle({"warm": 0, "calls": 1}, built, cases, torch)
    assert len(calls) == 1  # no settle asked: the calls asked
