"""A pair's sessions as the page states them (benchmarks.core.pairing.sessions, reports.analyses.paired): the
memory state most sessions drew where a side ran in two, each ratio with the interval its answer row states,
and the fresh pages a paired call faulted in."""

from __future__ import annotations

import pytest
from run_helpers import paired_row as pair
from run_helpers import pairs_record as record

from benchmarks import pairs
from benchmarks.core.pairing import sessions
from benchmarks.core.timing import rerun
from reports import measured


class HeadsSessions(sessions.PairRounds):
    """A heads pair's rounds as ``pairs.Sessions`` leaves them: each session's ratios (64 heads' time over one head's)
    and side b's (64 heads') page faults per call."""

    def __init__(self, per_session: list[tuple[list[float], float]]):
        self.ratios = [[r for rs, _ in per_session for r in rs]]
        self.sessions = [[k for k, (rs, _) in enumerate(per_session) for _ in rs]]
        self.faults = [[{"a": 0.0, "b": f} for rs, f in per_session for _ in rs]]
        self.skipped, self.settled, self.kinds = {}, set(), ["heads"]


def test_a_pair_whose_side_ran_in_two_memory_states_counts_the_state_most_sessions_drew_and_names_both():
    # 64 heads' scores faulted in afresh every call in sessions 0 and 2 (4.4x), kept in session 1 (2.2x)
    split = HeadsSessions([([4.3, 4.5], 65538.0), ([2.1, 2.3], 0.0), ([4.4, 4.5], 65538.0)])
    every = split.estimates()[0]
    got = sessions.in_memory_states(split, 0, every)
    assert got["state_side"] == "b" and got["state_sessions"] == [0, 2]
    assert got["ratio"] == pytest.approx(4.42, rel=0.02) and got["low"] < got["ratio"] < got["high"]
    assert got["over_every_session"] == [every.ratio, every.low, every.high] and every.ratio < 4.0
    fast, slow = got["modes"]
    assert (fast["sessions"], fast["counted"], slow["sessions"], slow["counted"]) == (1, False, 2, True)
    assert fast["ratio"] == pytest.approx(2.2, rel=0.02) and slow["faults_per_call"] == 65538.0
    said = pairs.notes({"ratio": got["ratio"], **got})
    assert "two memory states: 1 session at 2.20; 2 sessions at 4.4" in said and said.endswith(", counted)")
    # the same sessions for C2's rule: the faster state counts
    assert sessions.memory_state_sessions(split, 0, "b", counted="faster")[0] == [1]
    # levels apart without a fault split, or faults alike: one state, every session counts, nothing added
    assert sessions.in_memory_states(HeadsSessions([([4.3], 9.0), ([2.2], 0.0), ([4.4], 12.0)]), 0, every) == {}
    assert sessions.in_memory_states(HeadsSessions([([4.3], 65538.0), ([4.1], 65538.0), ([4.4], 65538.0)]), 0,
                                  every) == {}


def test_the_answer_gives_a_paired_ratio_with_both_memory_states():
    from reports.analyses import paired
    from reports.analyses.base import Analysis

    states = [{"ratio": 2.2, "sessions": 1, "counted": False, "faults_per_call": 0.0},
              {"ratio": 4.4, "sessions": 2, "counted": True, "faults_per_call": 65538.0}]
    a = paired.analyse([record([{**pair("heads", {"strategy": "batched", "out_proj": True, "device": "cpu"},
                                        4.4, 4.0, 4.9), "modes": states}])])
    said = "over 2 of 3 sessions, the memory state most drew (65,538 page faults a call); the other, at 0, gave 2.20×"
    assert f"batched 4.40× (4.00-4.90; {said})" in a.verdict
    heads = Analysis("c3_heads", "C3", "C3/C4", "", numbers={"matmul_flops_max_over_min": 1.0,
                                                             "time_ratio_h64_over_h1_batched": 4.3})
    paired.reconcile(Analysis("c1_length", "C1", "C1", ""), heads, a, [record([
        {**pair("heads", {"strategy": "batched", "device": "cpu"}, 4.4, 4.0, 4.9), "modes": states}])])
    assert f"4.40× (batched, paired, 95% 4.00-4.90; {said}) the time of h = 1" in heads.answer
    saved = {**record([{**pair("heads", {"strategy": "batched"}, 4.4, 4.0, 4.9), "modes": states, "meaning": "m",
                        "axis": "heads", "a": 1, "b": 64}]), "generated": "2026-12-07T03:00:00+00:00", "commit": "abc",
             "elapsed_s": 40.0, "machine": {"cpu_model": "AMD EPYC", "cpu_count": 2, "torch": "2.13.0+cpu"}}
    said = "| 4.400 (two memory states: 1 session at 2.20; 2 sessions at 4.40, counted) | 4.000-4.900 |"
    assert measured.markdown(saved, "pairs.json").count(said) == 1


def test_the_paired_section_states_each_ratio_with_the_interval_its_answer_row_states():
    import pandas as pd

    from reports.analyses import paired
    from reports.analyses.base import BETWEEN, Analysis

    c1_pair = pair("c1", {"preset": "paper-base", "seq_len": 128, "batch": 8, "device": "cpu"}, 0.75, 0.69, 0.82)
    token = BETWEEN.set({"c1_length.paired": 0.002})  # what moved between this machine's runs
    try:
        a = paired.analyse([record([c1_pair])])
        c1 = Analysis("c1_length", "C1", "C1", "")
        c1.tables["factors"] = pd.DataFrame([{"device": "cpu", "preset": "paper-base", "seq_len": 128, "speedup": 0.74,
                                              "speedup_low": 0.6, "speedup_high": 0.9}])
        paired.reconcile(c1, Analysis("c3_heads", "C3", "C3/C4", ""), a, [record([c1_pair])])
    finally:
        BETWEEN.reset(token)
    low, high = rerun.widened(0.75, 0.69, 0.82, 0.002)
    assert low < 0.69 and high > 0.82
    assert f"paper-base n = 128: the RNN faster (0.75×, {low:.2f}-{high:.2f})" in a.verdict
    assert f"0.75× (paired, 95% {low:.2f}-{high:.2f})" in c1.answer
    assert a.verdict.endswith("and what moved between this machine's runs.")
    alone = paired.analyse([record([c1_pair])])  # nothing kept between runs: the run's own interval
    assert "(0.75×, 0.69-0.82)" in alone.verdict and "moved between" not in alone.verdict


def test_c3s_verdict_counts_the_fresh_pages_a_paired_call_faulted_in_after_its_warm_up():
    from reports.analyses import paired
    from reports.analyses.base import Analysis

    def heads_pair(strategy, ratio, faults_64):
        return {**pair("heads", {"strategy": strategy, "device": "cpu"}, ratio, ratio * 0.9, ratio * 1.1),
                "a": 1, "b": 64, "round_faults": [{"a": 0.0, "b": f} for f in faults_64]}

    def c3(records, hands_back=False):
        heads = Analysis("c3_heads", "C3", "C3/C4", "Grid's.", numbers={
            "matmul_flops_max_over_min": 1.0, "time_ratio_h64_over_h1_batched": 4.3,
            "time_ratio_h64_over_h1_sdpa": 2.4})
        paired.reconcile(Analysis("c1_length", "C1", "C1", ""), heads, Analysis("paired", "P", "C1/C2/C3", ""),
                         records, hands_back=hands_back)
        return heads.verdict

    faulting = [record([heads_pair("batched", 4.4, [65538.0, 65538.0, 66050.0]), heads_pair("sdpa", 2.4, [0.0] * 3)])]
    assert c3(faulting) == ("Grid's. In the paired sessions each call at h = 64 faulted in fresh memory pages: 65,538 "
                            "(batched), 0 (sdpa), against 0, 0 at h = 1 (minor page faults a call, medians over the "
                            "sessions' blocks, after their warm-up): memory the allocator gave back to the OS after "
                            "the call before, written afresh, in time that no FLOP count sees.")
    # a machine that hands its free memory back to its host: what a fresh page may cost there is said
    assert c3(faulting, hands_back=True).endswith("no FLOP count sees. This machine hands its free memory back to its "
                                                  "host (free page reporting): a fresh page may wait for the host as "
                                                  "well, more so after other processes freed much memory, so a "
                                                  "session's ratio moves with what ran just before it.")
    assert c3([record([heads_pair("batched", 4.4, [3.0] * 3)])], hands_back=True) == "Grid's."
    assert c3([record([heads_pair("batched", 4.4, [3.0] * 3)])]) == "Grid's."  # a warm-up's few pages: nothing said
    assert c3([record([pair("heads", {"strategy": "batched", "device": "cpu"}, 4.4, 4.0, 4.8)])]) == "Grid's."
