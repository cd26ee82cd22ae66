"""The performance model's constants, cached per machine, software and thread count: reused while fresh,
measured again when stale, asked for, unreadable, or measured under other conditions."""

import datetime as dt
import json

import pytest
import torch

from benchmarks.core.hardware import constants, constants_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_BENCH_CACHE", str(tmp_path))
    calls = []

    def measure(device, dtype, quick):
        calls.append((device, dtype, quick, torch.get_num_threads()))
        return {"device": device, "n": len(calls)}

    return calls, measure


def test_constants_are_measured_once_then_reused(cache):
    calls, measure = cache
    first, said = constants_cache.get("cpu", "float32", True, measure=measure)
    assert said == "measured now" and first == {"device": "cpu", "n": 1}
    again, said = constants_cache.get("cpu", "float32", True, measure=measure)
    assert again == first and said.startswith("cached, measured ") and len(calls) == 1
    # asked for: measured again, and that measurement is the one kept
    fresh, said = constants_cache.get("cpu", "float32", True, again=True, measure=measure)
    assert fresh["n"] == 2 and said == "measured now"
    assert constants_cache.get("cpu", "float32", True, measure=measure)[0]["n"] == 2


def test_other_conditions_or_a_stale_or_broken_file_are_measured_again(cache, monkeypatch):
    calls, measure = cache
    constants_cache.get("cpu", "float32", True, measure=measure)
    constants_cache.get("cpu", "float32", False, measure=measure)  # the full grid is another measurement
    assert len(calls) == 2
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # another runtime regime
    constants_cache.get("cpu", "float32", True, measure=measure)
    assert len(calls) == 3
    monkeypatch.delenv("OMP_WAIT_POLICY")
    path = constants_cache.path(constants_cache.fingerprint("cpu", "float32", True))
    saved = json.load(open(path))
    saved["measured_at"] = (dt.datetime.now(dt.timezone.utc)
                            - dt.timedelta(days=constants_cache.MAX_AGE_DAYS + 1)).isoformat()
    json.dump(saved, open(path, "w"))
    assert constants_cache.get("cpu", "float32", True, measure=measure)[1] == "measured now"
    open(path, "w").write("{not json")
    assert constants_cache.get("cpu", "float32", True, measure=measure)[1] == "measured now"
    assert len(calls) == 5


def test_constants_whose_kernels_ran_slowed_are_measured_once_more_and_the_better_kept(cache):
    calls = []

    def measure(device, dtype, quick):  # the GEMM kernel at one thread's rate beside a 2-thread control, then not
        calls.append(quick)
        best = 105e9 if len(calls) == 1 else 195e9
        return {"quick": quick, "kernels": {"gemm": {"flops_per_s": [1e9, best]}}, "control_flops_per_s": 162e9}

    got, _ = constants_cache.get("cpu", "float32", False, measure=measure)
    assert len(calls) == 2 and max(got["kernels"]["gemm"]["flops_per_s"]) == 195e9
    assert got["measured_twice"].startswith("their GEMM kernel's best rate, 105 GFLOP/s, is below 80% of the "
                                            "control GEMM's 162 GFLOP/s")
    assert constants.disturbed(got) is None and constants.disturbed({**got, "quick": True}) is None
    calls.clear()
    constants_cache.get("cpu", "float32", False, again=True, measure=lambda *a: measure(*a) if calls else (
        calls.append(0) or {"quick": False, "kernels": {"gemm": {"flops_per_s": [190e9]}},
                            "control_flops_per_s": 180e9}))
    assert len(calls) == 1  # a quiet measurement stands alone


def test_a_run_measures_its_current_thread_count_and_takes_the_others_only_from_the_cache(cache, monkeypatch):
    calls, measure = cache
    monkeypatch.setattr(constants, "measure", measure)
    current, other = torch.get_num_threads(), torch.get_num_threads() + 1
    ours, theirs = (f"cpu/float32/{t}" for t in (current, other))
    sources = {}
    got = constants_cache.this_machine([other], quick=True, sources=sources)
    assert list(got) == [ours] and sources == {ours: "measured now"}  # the strong-scaling count: not measured
    assert [c[3] for c in calls] == [current]
    again = constants_cache.this_machine([other], quick=True, again=True)  # --recalibrate: every count, then cached
    assert set(again) == {ours, theirs} and [c[3] for c in calls] == [current, current, other]
    later = constants_cache.this_machine([other], quick=True, sources=sources)
    assert later == again and all(s.startswith("cached") for s in sources.values()) and len(calls) == 3
