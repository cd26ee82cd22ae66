"""The operator breakdown: components partition the profiled call, add up to the unprofiled one, carry the
analytic FLOPs exactly; traces hold the model's labels; memory names what holds the peak; bad input is a
clear error."""

import gzip
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import time

import pytest
import torch
from run_helpers import in_process, quiet_machine

from benchmarks import cases
from benchmarks.core import opgraph
from benchmarks.core.hardware import machine
from benchmarks.core.profiling import profiler

MODEL_CASES = [("models", {"model": m, "preset": "tiny", "seq_len": 6, "batch": 2, "device": "cpu"}, method)
               for m in ("transformer", "rnn-width", "rnn-params") for method in cases.METHODS["models"]]
OTHER_CASES = ([("multihead", {"heads": 4, "strategy": s, "out_proj": o, "device": "cpu"}, method)
                for s in ("batched", "looped", "sdpa") for o in (True, False) for method in ("forward", "train_step")]
               + [("attention", {"seq_len": 128, "d_head": 64, "backend": b, "causal": c, "dtype": "float32",
                                 "device": "cpu"}, "forward") for b in ("math", "sdpa") for c in (False, True)]
               + [("layers", {"layer": kind, "seq_len": 32, "d_model": 64, "device": "cpu"}, "forward")
                  for kind in ("self-attention", "recurrent")])


@pytest.mark.parametrize("area, params, method", MODEL_CASES + OTHER_CASES,
                         ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.values())))
def test_component_matmul_flops_equal_the_analytic_model_exactly(area, params, method):
    case = cases.build(area, params)
    graph = opgraph.record(case.work(method)[0])
    counted = graph.flops_by(profiler.component)
    analytic = profiler.analytic_by_component(case, method, profiler._fused(graph))
    assert counted == analytic
    assert profiler.UNLABELLED not in counted and profiler.GLUE not in counted  # every matmul has its component


MATH_CASE = ["--grid", "default", "--area", "attention", "--param", "seq_len=512", "--param", "backend=math",
             "--device", "cpu", "--cycles", "7"]


def profile_in_a_fresh_process(out) -> dict:
    """``attention-bench profile`` on the math attention case, as a user runs it: a process of its own,
    whose allocator has not been shaped by the tests before it (fresh 64 MiB score matrices page-fault or
    not depending on what the heap held before, and that moved the timings in long test sessions)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    with quiet_machine():  # its profiled and unprofiled calls are timed against each other
        before, children = machine.cpu_counters(), _children_cpu_s()
        done = subprocess.run([sys.executable, "-m", "attention_bench", "profile", *MATH_CASE, "--out", str(out)],
                              cwd=root, capture_output=True, text=True, timeout=300, env=env)
        after = machine.cpu_counters()
    assert done.returncode == 0, done.stderr[-2000:]
    others = machine.others_cpu_share(before, after)  # the profile's own process is this test's, not another's
    if others is not None:
        others = max(0.0, others - (_children_cpu_s() - children) * os.sysconf("SC_CLK_TCK") / (after[1] - before[1]))
    return {**profiler.load(str(out))[0], "stderr": done.stderr, "others_share": others}


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


#: the most of the cores other processes may use while a profile is taken for its timings to be held against each
#: other: beyond it, a call is disturbed at random, and two of them can differ by a quarter whatever the profiler does
QUIET_SHARE = 0.25


@pytest.fixture(scope="module")
def math_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("profiles")
    return profile_in_a_fresh_process(out), out


@pytest.mark.slow
def test_components_partition_the_profiled_call_and_add_up_to_the_unprofiled_one(math_profile, tmp_path):
    r, _ = math_profile
    assert r["components_total_s"] == pytest.approx(r["profiled_s"], rel=profiler.SUM_TOLERANCE)
    assert r["overhead"] == pytest.approx(r["profiled_s"] / r["unprofiled_s"] - 1)
    assert r["sum_within_tolerance"] == (abs(r["sum_over_unprofiled"] - 1) <= profiler.SUM_TOLERANCE)
    shares = {c["component"]: c["share"] for c in r["components"]}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert {"scores Q·Kᵀ", "softmax", "weights·V"} <= set(shares)
    assert r["flops_match_analytic"] and r["sequential_depth"] >= 3
    # The parts add up to the unprofiled call: a timing held against a timing. Its 64 MiB score matrices fault in
    # afresh on some calls and not on others, so one profile's fastest calls can still differ (idle, at one thread,
    # five profiles here gave 0.90, 1.01, 1.19, 0.99 and 1.01), and up to five profiles are taken: a systematic error
    # (time lost or counted twice by the grouping, an overhead not accounted for) misses in all of them. A profile
    # taken while other processes used more than QUIET_SHARE of the cores (0.90, 1.25 and 0.81 beside two spinning
    # processes) says nothing either way: after two such in a row the tries stop (each holds the machine from the
    # other tests), and where such a profile was among them, the check is skipped and says why.
    taken = [r]
    busy = lambda p: p["others_share"] is not None and p["others_share"] > QUIET_SHARE  # noqa: E731
    while (abs(taken[-1]["sum_over_unprofiled"] - 1) > profiler.SUM_TOLERANCE and len(taken) < 5
           and not (len(taken) >= 2 and busy(taken[-1]) and busy(taken[-2]))):
        taken.append(profile_in_a_fresh_process(tmp_path / str(len(taken))))
    said = [(round(p["sum_over_unprofiled"], 3), p["others_share"] and round(p["others_share"], 2)) for p in taken]
    if abs(taken[-1]["sum_over_unprofiled"] - 1) > profiler.SUM_TOLERANCE and any(busy(p) for p in taken):
        pytest.skip(f"other processes used more than {QUIET_SHARE:.0%} of the cores during some of the profiles (sum "
                    f"over the unprofiled call, others' share: {said}): their timings cannot be held against each "
                    "other")
    assert abs(taken[-1]["sum_over_unprofiled"] - 1) <= profiler.SUM_TOLERANCE, said


@pytest.mark.slow
def test_profiling_on_the_cpu_does_not_print_the_tracers_start_and_stop_lines(math_profile):
    r, _ = math_profile
    assert r["cycles"] == 7  # seven profiler sessions (and the trace's), each of which printed two lines before
    assert "profiler_start" not in r["stderr"] and "profiler_stop" not in r["stderr"], r["stderr"][-1000:]


@pytest.mark.slow
def test_the_trace_is_gzipped_chrome_json_with_the_models_labels(math_profile):
    r, out = math_profile
    folder = os.path.join(out, "profiles", os.listdir(os.path.join(out, "profiles"))[0])
    with gzip.open(os.path.join(folder, r["trace"])) as f:
        names = {e.get("name") for e in json.load(f)["traceEvents"]}
    assert {"attention.scores", "attention.softmax", "attention.weights_v"} <= names
    assert r["memory_timeline"] and r["memory_figure"] == "memory.png"  # the report draws it (test_report_browser)
    assert profiler.load(str(out))[0]["sequential_depth"] == r["sequential_depth"]


@pytest.mark.slow
def test_memory_at_the_peak_is_held_by_the_score_matrices(math_profile):
    r, _ = math_profile
    batch = cases.tokens("attention", {"seq_len": 512, "device": "cpu"}) // 512
    scores = batch * 8 * 512 * 512 * 4  # the (batch, h, n, n) float32 scores, then the weights
    assert r["peak_bytes"] >= 2 * scores
    held = r["memory_by_component"]
    assert held.get("scores Q·Kᵀ", 0) >= scores and held.get("softmax", 0) >= scores


@pytest.mark.parametrize("argv, message", [
    (["--area", "nope"], "argument --area: invalid choice: 'nope'"),
    (["--area", "models", "--param", "model=lstm"],
     "--param 'model=lstm': model is never 'lstm' on grid 'default'; allowed: rnn-params, rnn-width, transformer"),
    (["--area", "models", "--param", "preset=huge"],
     "preset is never 'huge' on grid 'default'; allowed: paper-base, tiny"),
    (["--area", "models", "--param", "seq_len=0"], "seq_len is never '0' on grid 'default'; allowed: "),
    (["--area", "models", "--param", "seq_len"], "--param 'seq_len': give AXIS=VALUE"),
    (["--area", "attention", "--param", "heads=8"], "no axis 'heads' in the chosen cases of grid 'default'"),
    (["--area", "multihead", "--method", "generate"], "no case to profile: areas ['multihead'] have none of the "
     "methods ['generate']"),
    (["--set", "everything"], "argument --set: invalid choice: 'everything' (choose from 'quick', 'default')"),
    (["--set", "quick", "--area", "models"], "--set 'quick' names its cases: give it alone"),
    ([], "give --set NAME, or --area AREA"),
])
def test_bad_input_is_a_clear_error(argv, message, capsys, tmp_path):
    code, err = in_process(capsys, "profile", *argv, "--out", str(tmp_path))
    assert code == 2 and message in err, err
    assert not os.path.exists(os.path.join(tmp_path, "profiles"))  # nothing half-written


@pytest.mark.slow
def test_the_main_jobs_profiles_run_in_a_process_of_their_own(tmp_path, monkeypatch):
    """A calibration sets torch's threads in the main job's process (which slows small operators for the rest of
    the process); its profiles run in a fresh one, at torch's own thread count."""
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS")  # torch's own count, as users start it (conftest sets one)
    fresh = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True,
                           text=True, check=True)
    default = int(fresh.stdout)  # what a process of its own starts with
    if default == 1:
        pytest.skip("one core: the thread count cannot tell the processes apart")
    before = torch.get_num_threads()
    pools, real = [], multiprocessing.context.SpawnContext.Pool
    monkeypatch.setattr(multiprocessing.context.SpawnContext, "Pool",
                        lambda self, *a, **k: pools.append(real(self, *a, **k)) or pools[-1])
    torch.set_num_threads(1)
    try:
        case = ("attention", {"seq_len": 128, "d_head": 64, "backend": "sdpa", "causal": False, "dtype": "float32",
                              "device": "cpu"}, "forward")
        counts = profiler.run_set_fresh([case], str(tmp_path), cycles=1, progress=True)
    finally:
        torch.set_num_threads(before)
    assert counts == {"ok": 1}
    assert [r["threads"] for r in profiler.load(str(tmp_path))] == [default]
    from benchmarks.core import records  # and it says the regime it ran in: this process's settings, its threads
    assert [r["regime"] for r in profiler.load(str(tmp_path))] == [{"threads": default, "env": records.regime()["env"]}]
    # its process ended on its own, not killed by the pool's exit while it cleaned up (which leaves the run's
    # shutdown a warning of a leaked semaphore: the progress bar's lock)
    assert [p.exitcode for p in pools[0]._pool] == [0]


def _profiles(overheads, within):
    """Profile records of tiny Transformers, one per overhead, the first ``within`` adding up."""
    return [{"area": "models", "method": "forward", "device": "cpu", "threads": 2, "unprofiled_s": 0.01,
             "profiled_s": 0.01 * (1 + o), "overhead": o, "components_total_s": 0.01, "sum_over_unprofiled": 1.0,
             "sum_within_tolerance": i < within, "flops_match_analytic": True, "sequential_depth": 10,
             "op_launches": 100, "peak_bytes": 1, "folder": f"profiles/case-{i}", "trace": "trace.json.gz",
             "memory_figure": "memory.png", "commit": "abc",
             "params": {"model": "transformer", "preset": "tiny", "seq_len": 16 + i, "batch": 8},
             "components": [{"component": "ffn", "time_s": 0.01, "share": 1.0, "calls": 1, "launches": 1,
                             "analytic_matmul_flops": 1, "counted_matmul_flops": 1, "achieved_flops_per_s": 1e2,
                             "matmul_component": True}], "memory_by_component": {}}
            for i, o in enumerate(overheads)]


def test_the_profilers_overhead_and_the_profiles_that_add_up_carry_where_a_rerun_lands():
    from reports.analyses import base, profiling

    steady = profiling.analyse(profiling.table(_profiles([0.01, 0.012, 0.008, 0.011] * 3, within=11)))
    spread = profiling.analyse(profiling.table(_profiles([-0.05, 0.0, 0.04, 0.09] * 3, within=11)))
    widths = []
    for a in (steady, spread):
        low, high = a.intervals["profiled_over_unprofiled"]
        assert low < a.numbers["profiled_over_unprofiled"] < high
        widths.append(high / low)
        assert a.intervals["sum_within_tolerance"][0] <= 10 and a.intervals["sum_within_tolerance"][1] == 12
        assert "in 11 (" in a.answer and " to +" in a.answer  # the count's interval, the overhead's signed
    assert widths[0] < widths[1]
    token = base.BETWEEN.set({"profiling": 0.05})  # a machine whose runs move: the overhead's interval widens; the
    try:  # count's is a count's, and stays its own
        moved = profiling.analyse(profiling.table(_profiles([0.01, 0.012, 0.008, 0.011] * 3, within=11)))
    finally:
        base.BETWEEN.reset(token)
    assert moved.intervals["sum_within_tolerance"] == steady.intervals["sum_within_tolerance"]
    (low, high), (steady_low, steady_high) = (a.intervals["profiled_over_unprofiled"] for a in (moved, steady))
    assert low < steady_low and high > steady_high
    assert "profiled_over_unprofiled" not in profiling.analyse(profiling.table(_profiles([0.01], 1))).intervals


def test_the_profiles_conditions_name_the_runtime_settings_they_were_taken_in():
    from reports.analyses import profiling

    def said(**regimes):
        profiles = [{**p, "dtype": "float32", **regimes} for p in _profiles([0.01], 1)]
        return profiling.analyse(profiling.table(profiles)).conditions

    default, passive = ({"threads": 2, "env": env} for env in ({}, {"OMP_WAIT_POLICY": "PASSIVE"}))
    assert said(regime=default) == "cpu, 2 CPU threads, float32, runtime default; each bar names its case"
    assert "runtime OMP_WAIT_POLICY=PASSIVE;" in said(regime=passive, run_regime=default)  # its own
    assert "runtime OMP_WAIT_POLICY=PASSIVE;" in said(run_regime=passive)  # a profile without one: its run's
    assert "runtime" not in said()  # neither says


def test_a_case_gets_as_many_cycles_as_fit_in_the_budget_at_its_speed_unless_told(monkeypatch):
    assert profiler.cycles_for(0.6) == profiler.MIN_CYCLES  # a paper-base forward pass: 2 cycles, not 5
    assert profiler.cycles_for(0.001) == profiler.MAX_CYCLES and profiler.cycles_for(0.25) == 4
    monkeypatch.setattr(profiler, "CYCLE_BUDGET_S", 0.25)  # at most 3 cycles of four calls of 20 ms or more
    real, first = profiler.cycles_for, []
    monkeypatch.setattr(profiler, "cycles_for", lambda seconds: first.append(seconds) or real(seconds))

    def call():
        with torch.profiler.record_function("attention.scores"):
            time.sleep(0.02)

    got = profiler.profile_times(call, "cpu")["cycles"]
    assert first[0] >= 0.02 and got == real(first[0]) <= 3  # from the first call's time, however long it took
    assert profiler.profile_times(call, "cpu", cycles=4)["cycles"] == 4 and len(first) == 1
