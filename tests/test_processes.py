"""Every case timed in several fresh processes: the figure is the median over processes, its interval their
range, and a case whose processes ran it at two levels is said to have two modes."""

import math
import mmap
import os
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from benchmarks import cases
from benchmarks.core.hardware import machine
from benchmarks.core.running import runner
from benchmarks.core.timing import measure, rerun
from reports import figures, spans_over_processes, tidy
from reports.analyses import noise
from reports.analyses.base import Figure, time_curves
from reports.analyses.spread import ratio_spread, spread_phrase

PLAN = [("models", {"model": "transformer", "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"}),
        ("threads", {"workload": "attention", "threads": 1})]


def _round(median, spread=0.01, pid=1, faults=None):
    """A round as measure.timed_round writes it: its median and quartiles (``spread``: IQR over median)."""
    return {"started_at": "2026-01-01T00:00:00+00:00", "pid": pid, "median_s": median,
            "q25_s": median * (1 - spread / 2), "q75_s": median * (1 + spread / 2), "blocks": 5,
            "calls_per_block": 10, "control_flops_per_s": None, "others_cpu_share": None, "faults_per_call": faults}


def test_processes_that_disagree_beyond_their_own_spread_are_two_modes():
    two = measure.modes_of([_round(0.014, pid=1), _round(0.028, pid=2), _round(0.0142, pid=3)])
    assert two == [{"time_s": pytest.approx(0.0141), "processes": 2}, {"time_s": 0.028, "processes": 1}]
    assert measure.modes_of([_round(0.010, pid=1), _round(0.0105, pid=2), _round(0.011, pid=3)]) is None
    # a 30% gap between processes each as noisy as 20% is not beyond their own spread
    assert measure.modes_of([_round(0.010, 0.2, 1), _round(0.013, 0.2, 2), _round(0.0131, 0.2, 3)]) is None


def test_processes_of_one_block_each_measure_no_spread_and_are_two_modes_only_when_their_faults_split():
    # a slow call timed once per process: its IQR of 0 says nothing of how much a process's time varies
    single = [{**_round(t, 0.0, pid), "blocks": 1} for pid, t in enumerate((0.160, 0.141, 0.145))]
    assert measure.modes_of(single) is None
    split = [{**r, "faults_per_call": f} for r, f in zip(single, (9000, 100, 120), strict=True)]
    assert [m["processes"] for m in measure.modes_of(split)] == [2, 1]


def test_processes_split_by_page_faults_are_two_modes_though_their_blocks_are_spread():
    # math attention at n = 128: one process's allocator keeps its score buffers, the others' give them back
    rounds = [_round(0.016, 0.02, 1, 8160), _round(0.0089, 0.33, 2, 51), _round(0.0162, 0.02, 3, 8160)]
    assert measure.modes_of(rounds) == [{"time_s": 0.0089, "processes": 1, "faults_per_call": 51},
                                        {"time_s": pytest.approx(0.0161), "processes": 2, "faults_per_call": 8160}]
    # as a run counts them, the warm-up's first faults spread over few timed calls
    counted = [_round(0.0091, 0.3, 1, 4417), _round(0.0169, 0.02, 2, 11272), _round(0.0088, 0.3, 3, 4389)]
    assert [m["processes"] for m in measure.modes_of(counted)] == [2, 1]
    # the same times and spreads without a split in faults: within the fast process's own spread
    assert measure.modes_of([{**r, "faults_per_call": 60} for r in rounds]) is None
    assert measure.modes_of([{**r, "faults_per_call": None} for r in rounds]) is None


def test_a_case_at_two_modes_gives_its_faster_modes_time_and_interval_from_that_modes_processes():
    rounds = [_round(t, 0.02, i, f) for i, (t, f) in enumerate(
        [(0.0090, 4100), (0.0170, 11000), (0.0086, 4000), (0.0165, 10800), (0.0088, 4200)])]
    rec = {"processes": 5, "rounds": rounds, "time_median_s": 0.0090, "time_low_s": 0.0086, "time_high_s": 0.0170}
    got = spans_over_processes.spans(rec, prior=0.001)
    assert got["modes"].startswith("8.8 ms in 3 processes") and got["fast"] == pytest.approx(0.0088)
    fast_logs = np.log([0.0086, 0.0088, 0.0090])
    low, high = rerun.interval(0.0088, rerun.half_width(fast_logs, 0.001))
    assert (got["fast_low"], got["fast_high"]) == (pytest.approx(low), pytest.approx(high))
    # a rate's faster mode is its count over the faster time, the interval's ends swapped
    assert spans_over_processes.per_time(got, 1e9) == {"fast": pytest.approx(1e9 / 0.0088),
                                                       "fast_low": pytest.approx(1e9 / high),
                                                       "fast_high": pytest.approx(1e9 / low)}
    assert "fast" not in spans_over_processes.spans({**rec, "rounds": rounds[::2][:2] + [rounds[4]]}, prior=0.001)
    # two levels whose slower side faults in only a warm-up's pages per call, not its intermediates afresh: two
    # modes, named, but not two memory states, so no faster mode stands for the case
    warm = [_round(t, 0.02, i, f) for i, (t, f) in enumerate([(0.0090, 0), (0.0120, 682), (0.0122, 700)])]
    got = spans_over_processes.spans({"processes": 3, "rounds": warm, "time_median_s": 0.0120, "time_low_s": 0.0090,
                                      "time_high_s": 0.0122}, prior=0.001)
    assert got["modes"].startswith("9 ms in 1 process") and "fast" not in got
    assert measure.memory_states(measure.modes_of(rounds)) and not measure.memory_states(measure.modes_of(warm))


def test_a_timed_round_counts_the_page_faults_of_its_calls():
    size, zeros, keep = 8 * 2**20, bytes(8 * 2**20), torch.empty(0)

    def fresh_pages():  # 8 MiB mapped anew and written each call: every page faults in
        with mmap.mmap(-1, size) as pages:
            pages.write(zeros)

    def nothing_new():
        keep.add_(1)

    assert measure.timed_round(fresh_pages, "cpu", 0.05)["faults_per_call"] >= size / 4096
    assert measure.timed_round(nothing_new, "cpu", 0.05)["faults_per_call"] < 64


def _faulting_calls(first: int):
    """A 2 ms call that maps and writes 8 MiB afresh on its first ``first`` calls (every page faults in), and
    then does not: a process settling into its memory state; and its list of calls. ``fn.settle_now()`` ends
    the faulting calls there, whatever ``first`` said."""
    size, zeros, calls, faulting = 8 * 2**20, bytes(8 * 2**20), [], [first]

    def fn():
        calls.append(None)
        if len(calls) <= faulting[0]:
            with mmap.mmap(-1, size) as pages:
                pages.write(zeros)
        time.sleep(0.002)
    fn.settle_now = lambda: faulting.__setitem__(0, len(calls))
    return fn, calls


#: a round in which a call of 2 ms and 8 MiB of fresh pages is cheap (``measure.cheap``) on a busy machine too
CHEAP_ROUND = 0.2


def test_a_cheap_round_that_faults_settles_and_is_timed_again_in_the_state_it_settled_in(monkeypatch):
    # faults through the first timing, however many calls a busy machine lets it make, and settles when settled
    settling, calls = _faulting_calls(first=10**9)
    settle, first_timing = measure.settle, []
    monkeypatch.setattr(measure, "settle", lambda fn: (first_timing.append(len(calls)), fn.settle_now(), settle(fn)))
    settled = measure.timed_round(settling, "cpu", CHEAP_ROUND)
    # timed once, its faulting calls would count; the settled round's timed calls (its last ones) come after them
    assert first_timing and settled["faults_per_call"] < measure.FAULT_PAGES
    assert len(calls) >= first_timing[0] + 1 + settled["blocks"] * settled["calls_per_block"]
    # settling calls until a call faults no more, at most SETTLE_CALLS times: a count of calls, not of time
    for first, made in ((0, 1), (2, 3), (10**9, measure.SETTLE_CALLS)):
        fn, calls = _faulting_calls(first)
        settle(fn)
        assert len(calls) == made
    monkeypatch.setattr(measure, "settle", settle)
    always, _ = _faulting_calls(first=10**9)
    assert measure.timed_round(always, "cpu", 0.05)["faults_per_call"] >= 2048  # no settled state to find
    # a call that costs more than CHEAP_SHARE of the round is timed once, however it faults
    slow, _ = _faulting_calls(first=10**9)
    settled_calls = []
    monkeypatch.setattr(measure, "settle", lambda fn: settled_calls.append(fn))  # not settling: noting
    assert measure.timed_round(lambda: (slow(), time.sleep(0.03)), "cpu", 0.05)["faults_per_call"] >= 2048
    assert settled_calls == []
    measure.timed_round(always, "cpu", CHEAP_ROUND)
    assert settled_calls == [always]


def test_processes_that_fault_on_every_call_of_a_cheap_case_are_unsettled():
    faulting = [_round(0.001, pid=i, faults=9000) for i in range(3)]
    assert measure.faulting_throughout(faulting, 0.01)
    assert not measure.faulting_throughout(faulting, 0.001)  # not cheap in a round this short
    assert not measure.faulting_throughout(faulting[:2] + [_round(0.001, pid=3, faults=40)], 0.01)
    assert not measure.faulting_throughout([], 0.01)


def test_a_record_over_processes_carries_their_range_and_count():
    rounds = [_round(0.020, pid=7), _round(0.010, pid=8), _round(0.011, pid=9)]
    fields = measure.combined(rounds)
    assert fields["processes"] == 3 and fields["time_median_s"] == 0.011
    assert (fields["time_low_s"], fields["time_high_s"]) == (0.010, 0.020)
    assert fields["modes"] == [{"time_s": pytest.approx(0.0105), "processes": 2}, {"time_s": 0.020, "processes": 1}]
    one_process = measure.combined([_round(0.020, pid=7), _round(0.010, pid=7), _round(0.011, pid=7)])
    assert one_process["processes"] == 1 and "modes" not in one_process


def _time_rows(model_times: dict[str, tuple[float, float, float]], processes=3) -> pd.DataFrame:
    return pd.DataFrame([{"model": m, "value": v, "low": lo, "high": hi, "q25": v, "q75": v, "samples": 3,
                          "rounds": 3, "processes": processes} for m, (lo, v, hi) in model_times.items()])


def test_a_ratio_of_two_times_over_processes_takes_their_intervals_in_quadrature():
    rows = _time_rows({"transformer": (0.009, 0.010, 0.012), "rnn-width": (0.040, 0.050, 0.060)})
    spread = ratio_spread(rows, "transformer", "rnn-width")
    assert spread["spread_over"] == "processes" and spread["processes"] == 3
    width = math.hypot(math.log(0.012 / 0.009) / 2, math.log(0.060 / 0.040) / 2)
    assert spread["speedup_low"] == pytest.approx(5.0 * math.exp(-width))
    assert spread["speedup_high"] == pytest.approx(5.0 * math.exp(width))
    assert 0.040 / 0.012 < spread["speedup_low"] and spread["speedup_high"] < 0.060 / 0.009  # not end to end
    assert "from the 3 or more fresh processes" in spread_phrase(spread, 5.0)
    # times from fewer processes fall back to their quartiles
    assert ratio_spread(_time_rows({"transformer": (0.009, 0.010, 0.012), "rnn-width": (0.04, 0.05, 0.06)},
                                   processes=1), "transformer", "rnn-width")["spread_over"] == "rounds"


def test_time_curves_carry_each_points_interval_and_the_figure_draws_it():
    rows = pd.DataFrame([{"seq_len": n, "model": m, "value": v, "low": v * 0.9, "high": v * 1.2}
                         for n in (16, 64) for m, v in (("transformer", n * 1e-4), ("rnn-width", n * 3e-4))])
    table, interval = time_curves(rows, "seq_len", "model")
    assert interval["low"].loc[64, "rnn-width"] == pytest.approx(64 * 3e-4 * 0.9)
    fig = figures._lines(Figure("t", table, scale=1e3, **interval))
    bars = [c for c in fig.axes[0].containers if c.__class__.__name__ == "ErrorbarContainer"]
    assert len(bars) == 2  # one per curve
    plt.close(fig)
    no_interval = time_curves(rows.drop(columns=["low", "high"]).assign(low=float("nan"), high=float("nan")),
                              "seq_len", "model")[1]
    assert no_interval == {}


def test_a_case_with_two_modes_is_listed_with_both_levels(tmp_path):
    record = {"area": "threads", "method": "forward", "params": {"workload": "attention", "threads": 1},
              "status": "ok", "reason": None, "commit": "abc", "started_at": "2026-01-01T00:00:00+00:00",
              **measure.combined([_round(0.014, pid=1), _round(0.028, pid=2), _round(0.0142, pid=3)])}
    rows = tidy._runner_rows(record, {"machine": "vm", "run": "r", "commit": "abc"})
    time_row = next(r for r in rows if r["metric"] == "time")
    assert time_row["modes"] == "14.1 ms in 2 processes; 28 ms in 1 process"
    split = measure.modes_of([_round(0.0089, 0.3, 2, 51), _round(0.016, 0.02, 1, 8160)])
    assert spans_over_processes.spans({"processes": 2, "time_low_s": 0.0089, "time_high_s": 0.016, "modes": split})[
        "modes"] == "8.9 ms in 1 process, 51 page faults per call; 16 ms in 1 process, 8160 page faults per call"
    table = tidy.frame(rows)
    listed = noise.two_mode_cases(table)
    assert len(listed) == 1 and listed["lowest process s"][0] == 0.014 and listed["highest process s"][0] == 0.028


@pytest.mark.parametrize("unsettled", ["two modes", "faulting throughout"])
def test_cases_whose_processes_disagree_get_more_processes(tmp_path, fake_peaks, monkeypatch, unsettled):
    """After the planned rounds, up to EXTRA_ROUNDS more for the methods still unsettled, only for them: with two
    modes, or faulting on every call of a cheap case in every process (each may have drawn the slower state)."""
    bimodal = PLAN[0][1]  # the tiny transformer: 14 ms in odd rounds, 28 ms in even ones; or 1 ms, faulting
    steady = "generate"  # a method of that case whose processes agree: it gets no further round

    def fake(case, method, *, previous=None, **kw):
        round_ = len((previous or {}).get("rounds", [])) + 1
        if method == steady:
            median, faults = 0.04, None
        elif unsettled == "two modes":
            median, faults = 0.028 if case.params == bimodal and round_ % 2 == 0 else 0.014, None
        else:  # cheap in a round of 0.01 / 3 s; the other case faults too, but not cheaply
            median, faults = (0.001, 9000) if case.params == bimodal else (0.04, 9000)
        rounds = (previous or {}).get("rounds", []) + [_round(median, pid=round_, faults=faults)]
        return {**measure.combined(rounds), "tokens": 1, "matmul_flops": 1, "other_flops": 0}

    monkeypatch.setattr(measure, "measure", fake)
    monkeypatch.setattr(cases, "build", lambda area, params: type("Built", (), {
        "params": params, "device": "cpu", "dtype": "float32", "threads": None,
        "methods": lambda self: cases.METHODS[area]})())
    started = []

    def in_this_process(self, remaining, round_, progress):
        started.append((round_, [p["workload"] if "workload" in p else p["model"] for _, p in remaining]))
        self._rounds(remaining, [round_], tqdm_off(), last=round_)

    monkeypatch.setattr(runner.Runner, "round_in_process", in_this_process)
    r = runner.Runner(str(tmp_path), min_run_time=0.01, rounds=3, fresh=True)
    r.run(PLAN, progress=False)
    assert [n for n, _ in started] == [1, 2, 3, 4, 5]
    assert started[3][1] == started[4][1] == ["transformer"]  # only the unsettled case
    for rec in r.records:
        two = rec["params"] == bimodal and rec["method"] != steady
        assert len(rec["rounds"]) == (5 if two else 3)
        assert bool(rec.get("modes")) == (two and unsettled == "two modes")
    started.clear()  # a second run finds every case whole, those with more rounds than planned too
    again = runner.Runner(str(tmp_path), min_run_time=0.01, rounds=3, fresh=True).run(PLAN, progress=False)
    assert again["resumed"] == len(PLAN) and started == []


def tqdm_off():
    from tqdm import tqdm

    return tqdm(disable=True)


def test_timing_a_case_that_sets_no_threads_never_sets_torchs_thread_count(monkeypatch, fake_peaks, tmp_path):
    """torch.set_num_threads, called at all, changes how the process runs small operators for the rest of its
    life: a case that does not choose its threads is timed without it, as its user runs it."""
    calls = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n) or real(n))
    case = cases.build("attention", {"seq_len": 128, "d_head": 64, "backend": "sdpa", "causal": False,
                                     "dtype": "float32", "device": "cpu"})
    record = measure.measure(case, "forward", min_run_time=0.02)
    assert record["time_median_s"] > 0 and record["control_flops_per_s"] > 0
    machine.gemm_peak.cache_clear()
    machine.calibrate()  # the default count only
    assert calls == []
    one = cases.build("threads", {"workload": "attention", "threads": 1})
    measure.measure(one, "forward", min_run_time=0.02)
    assert calls and calls[0] == 1 and torch.get_num_threads() == calls[-1]  # set, then restored
    order = []
    monkeypatch.setattr(runner.Runner, "run_case", lambda self, area, params, peaks, round_: order.append(area) or [])
    plan = [("threads", {"workload": "attention", "threads": 1}), ("models", {}), ("attention", {})]
    runner.Runner(str(tmp_path), min_run_time=0.01)._rounds(plan, [1], tqdm_off())
    assert order[-1] == "threads"  # the cases that set the threads run last in a round's process


def test_a_saved_run_names_its_planned_rounds_and_the_most_any_case_got():
    from reports import measured

    assert measured._run_rounds({"rounds": 5, "rounds_planned": 3}) == ", 3 rounds (up to 5 where processes disagreed)"
    assert measured._run_rounds({"rounds": 3, "rounds_planned": 3}) == ", 3 rounds"
    assert measured._run_rounds({"rounds": 1}) == ", 1 round" and measured._run_rounds({"rounds": None}) == ""


@pytest.mark.slow
def test_a_rounds_process_ends_when_the_run_that_started_it_is_killed(tmp_path):
    """A run killed by a signal (no exit handler runs) takes its round's process with it, instead of leaving it
    measuring for minutes with nobody to read its records."""
    import signal
    import subprocess
    import sys
    import time

    script = ("import sys, time; from benchmarks.core.running import runner\n"
              "r = runner.Runner(sys.argv[1], min_run_time=30, name='vm', rounds=2)\n"
              "r.peaks = {}\n"
              "r.round_in_process([('models', {'model': 'transformer', 'preset': 'tiny', 'seq_len': 16, 'batch': 8,"
              " 'device': 'cpu'})], 1, False)\n")
    from run_helpers import ROOT

    run = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "run")], cwd=ROOT)
    deadline = time.time() + 120
    while time.time() < deadline and not _round_process(run.pid):
        time.sleep(0.1)
    (kid,) = _round_process(run.pid)
    time.sleep(3)  # it is measuring (30 s of timing asked for)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.time() + 10
    while time.time() < deadline and os.path.exists(f"/proc/{kid}") and "Z" not in _state(kid):
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{kid}") or "Z" in _state(kid), "the round's process outlived its run"


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _round_process(parent: int) -> list[int]:
    """The round's process among ``parent``'s children (multiprocessing also starts its resource tracker)."""
    try:
        kids = map(int, open(f"/proc/{parent}/task/{parent}/children").read().split())
        return [k for k in kids if b"spawn_main" in open(f"/proc/{k}/cmdline", "rb").read()]
    except OSError:
        return []
