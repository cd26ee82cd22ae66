"""The memory states a machine's pairs drew, kept for its later runs (benchmarks.core.pairing.kept_states): a run
whose sessions all drew one state states its interval over another where the machine's earlier sessions drew it
often enough, and an earlier run measured the two side by side."""

from __future__ import annotations

import datetime as dt
import json
import math
import types

import pytest
from test_pairs_states import HeadsSessions

from benchmarks import pairs
from benchmarks.core.hardware import between_runs, machine
from benchmarks.core.pairing import kept_states, sessions
from benchmarks.core.timing import rerun
from reports.analyses import paired


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test keeps its states in a cache folder of its own."""
    monkeypatch.setenv("ATTENTION_BENCH_CACHE", str(tmp_path / "cache"))


CASES = {"a_case": "multihead/forward/h1", "b_case": "multihead/forward/h64"}


def heads_row(per_session: list[tuple[list[float], float]]) -> dict:
    """A heads pair's row as ``pairs.Sessions`` makes it from sessions of (ratios, 64 heads' faults a call)."""
    split = HeadsSessions(per_session)
    est = split.estimates()[0]
    return {"kind": "heads", "params": {"strategy": "batched", "out_proj": True, "device": "cpu"}, **CASES,
            "status": "ok", "ratio": est.ratio, "low": est.low, "high": est.high, "rounds": est.rounds,
            "a_s": 0.01, "b_s": 0.01 * est.ratio, "round_ratios": split.ratios[0], "sessions": split.sessions[0],
            "round_faults": split.faults[0], **sessions.in_memory_states(split, 0, est)}


#: a run whose sessions drew both states: 64 heads' scores halfway kept (32,769 faults a call, 4.0x) in two
#: sessions, faulted in afresh (65,538, 5.0x) in one
BOTH = [([3.9, 4.1], 32769.0), ([4.0, 4.0], 32769.0), ([5.0, 5.1], 65538.0)]
#: runs whose sessions all drew one of them
AFRESH = [([5.6, 5.5], 65538.0), ([5.7, 5.6], 65794.0), ([5.5, 5.6], 65538.0)]
KEPT = [([3.9, 4.0], 32769.0), ([4.1, 4.0], 32769.0), ([3.9, 4.1], 32769.0)]


def test_a_run_that_drew_both_states_states_its_interval_over_both():
    row = heads_row(BOTH)
    fast, slow = row["modes"]
    assert row["ratio"] == pytest.approx(4.0, rel=0.02) and fast["counted"] and not slow["counted"]
    own_low, own_high = row["state_interval"]
    assert row["low"] == own_low and row["high"] == pytest.approx(own_high * slow["ratio"] / fast["ratio"])
    assert row["high"] > own_high  # reaching as far above the other state as the counted one's reaches above it
    said = paired.analyse([{"pairs": [row], "device": "cpu"}]).verdict
    assert "the other, at 65,538, gave 5.05×; the interval holds both" in said


def test_a_later_run_that_drew_one_state_states_its_interval_over_another_the_machine_drew(tmp_path):
    facts = machine.metadata()
    first = kept_states.attach(facts, [heads_row(BOTH)], "run1")
    assert "earlier_states" not in first[0]  # nothing kept before it
    afresh = heads_row(AFRESH)
    assert not afresh.get("modes")
    got = kept_states.attach(facts, [afresh], "run2")[0]
    earlier = got["earlier_states"]
    assert (earlier["side"], earlier["faults"], earlier["sessions"]) == ("b", 65538.0, 3)
    (state,) = earlier["states"]
    assert state["faults"] == 32769.0 and state["sessions"] == 2
    assert state["chance"] == pytest.approx(kept_states.majority_chance(2 / 3, 3))
    factor = state["factor"]
    assert factor == pytest.approx(4.0 / 5.05, rel=0.02)  # measured within run 1: the faster state over the slower
    assert got["state_interval"] == [afresh["low"], afresh["high"]] and got["ratio"] == afresh["ratio"]
    assert got["low"] == pytest.approx(afresh["low"] * factor) and got["high"] == afresh["high"]
    assert got["low"] < got["ratio"] * factor < got["high"]  # where this run's ratio would be in the other state
    said = kept_states.said(earlier)
    assert said == ("memory state 65,538 page faults a call; 2 of 3 earlier sessions drew 32,769 (0.79× this ratio, "
                    "a 74% chance for a rerun): the interval holds both")
    assert said in pairs.notes(got) and said in paired.analyse([{"pairs": [got], "device": "cpu"}]).verdict
    # a run of the faster state reaches up to the slower one
    kept = kept_states.attach(facts, [heads_row(KEPT)], "run3")[0]
    assert kept["high"] == pytest.approx(kept["state_interval"][1] / factor, rel=0.01)


def test_a_state_drawn_too_rarely_or_never_beside_this_one_adds_nothing():
    facts = machine.metadata()
    kept_states.attach(facts, [heads_row(BOTH)], "both")
    for i in range(10):  # 30 more sessions of the slower state: the faster one is 2 of 36, too rare to be a figure
        kept_states.attach(facts, [heads_row(AFRESH)], f"afresh{i}")
    got = kept_states.attach(facts, [heads_row(AFRESH)], "last")[0]
    assert "earlier_states" not in got
    assert kept_states.majority_chance(2 / 33, 3) < kept_states.TAIL
    # a warm-up's few pages (2,008 a call against 0) are no memory state, however often drawn beside
    facts3 = {**facts, "hostname": facts["hostname"] + "-3"}
    few = [([3.4, 3.5], 0.0), ([3.4, 3.3], 2008.0), ([3.5, 3.4], 2008.0)]
    kept_states.attach(facts3, [heads_row(few)], "few")
    assert "earlier_states" not in kept_states.attach(facts3, [heads_row(few[:1] * 3)], "none")[0]
    # a state drawn often, but never in a run beside this one: no factor measured, nothing added
    facts2 = {**facts, "hostname": facts["hostname"] + "-2"}
    for i in range(3):
        kept_states.attach(facts2, [heads_row(KEPT)], f"kept{i}")
    assert "earlier_states" not in kept_states.attach(facts2, [heads_row(AFRESH)], "afresh")[0]


def test_another_pair_or_machine_old_runs_and_a_run_kept_again_add_nothing():
    facts = machine.metadata()
    kept_states.attach(facts, [heads_row(BOTH)], "run1")
    other_pair = {**heads_row(AFRESH), "b_case": "multihead/forward/h32"}
    assert "earlier_states" not in kept_states.attach(facts, [other_pair], "run2")[0]
    apart = {**heads_row(AFRESH), "separate_workers": True}  # its sides each in a process of their own: other states
    assert "earlier_states" not in kept_states.attach(facts, [apart], "run2b")[0]
    assert "earlier_states" in kept_states.attach(facts, [heads_row(AFRESH)], "run2c")[0]  # as the first run was
    elsewhere = {**facts, "hostname": facts["hostname"] + "-other"}
    assert "earlier_states" not in kept_states.attach(elsewhere, [heads_row(AFRESH)], "run3")[0]
    c2 = {**heads_row(AFRESH), "kind": "c2"}  # C2's figure is the faster state's by design
    assert "earlier_states" not in kept_states.attach(facts, [c2], "run4")[0]
    # the first run, kept again in one state, replaces what it kept: nothing of both states is left
    assert "earlier_states" not in kept_states.attach(facts, [heads_row(AFRESH)], "run1")[0]
    kept_states.attach(facts, [heads_row(BOTH)], "run1")
    file = between_runs.path(facts, kept_states.NAME)
    saved = json.loads(open(file).read())
    old = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=kept_states.MAX_AGE_DAYS + 1)).isoformat()
    saved["kept"] = [{**e, "at": old} for e in saved["kept"]]
    open(file, "w").write(json.dumps(saved))
    assert "earlier_states" not in kept_states.attach(facts, [heads_row(AFRESH)], "run5")[0]
    open(file, "w").write("not json")  # a damaged file is started afresh
    assert "earlier_states" not in kept_states.attach(facts, [heads_row(AFRESH)], "run6")[0]


def test_the_pairs_command_states_and_keeps_the_machines_memory_states(tmp_path, monkeypatch):
    runs = iter([[heads_row(BOTH)], [heads_row(AFRESH)]])

    class Timed(pairs.Sessions):  # the sessions' rows as given, none timed here
        def __init__(self, *args, **kwargs):
            self.rows, self.env, self.stopped = next(runs), {}, None
            self.rounds_of = types.SimpleNamespace(session_started_at=[])

        def rest(self, budget, progress):
            pass

        def result(self):
            return self.rows, 3, 1.0, None, {"threads": 1, "env": {}}

    monkeypatch.setattr(pairs, "Sessions", Timed)
    pairs.measure(["heads"], "quick", "cpu", 1.0, str(tmp_path / "one.json"), progress=False)
    pairs.measure(["heads"], "quick", "cpu", 1.0, str(tmp_path / "two.json"), progress=False)
    row = json.loads((tmp_path / "two.json").read_text())["pairs"][0]
    assert row["earlier_states"]["states"][0]["faults"] == 32769.0 and row["low"] < row["state_interval"][0]


def test_an_interval_over_two_states_is_widened_and_compared_on_each_side():
    low, high = 0.60, 0.90  # 0.75 with its interval reaching down to the other state
    wide = rerun.widened(0.75, low, high, 0.002)
    extra = 2 * rerun.Z**2 * 0.002
    assert wide[0] == pytest.approx(0.75 * math.exp(-math.sqrt(math.log(0.75 / low) ** 2 + extra)))
    assert wide[1] == pytest.approx(0.75 * math.exp(math.sqrt(math.log(high / 0.75) ** 2 + extra)))
    centred = rerun.interval(0.75, 0.1)
    assert rerun.widened(0.75, *centred, 0.002) == pytest.approx(rerun.interval(0.75, math.sqrt(0.01 + extra)))
    # apart: the side that faces the other figure counts
    reaching_down = (1.0, 0.7, 1.05)
    assert not rerun.apart(reaching_down, (0.8, *rerun.interval(0.8, 0.05)))  # apart by the mean half-width
    assert rerun.apart(reaching_down, (1.3, *rerun.interval(1.3, 0.05)))
