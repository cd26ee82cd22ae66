"""What moves between runs of one machine beyond what a run's processes show: measured by reproduce over three runs
or more, kept for the machine, copied into its later runs' machine.json and added to their intervals."""

import json
import math
import os
import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from run_helpers import measured_run

from attention_bench.cli import main as attention_bench
from benchmarks.core import records
from benchmarks.core.hardware import between_runs, machine
from benchmarks.core.records import write_json_atomic
from benchmarks.core.timing import rerun
from reports import measured, publish, reproduce, tidy
from reports.analyses.base import BETWEEN, Analysis
from reports.analyses.registry import run_all


@given(st.lists(st.floats(-0.2, 0.2), min_size=2, max_size=6), st.floats(1e-5, 0.01), st.floats(0, 0.01))
def test_a_runs_own_error_is_read_back_from_its_interval_and_the_variance_between_runs_adds_to_it(logs, prior, v):
    width = rerun.half_width(np.array(logs), prior)
    low, high = rerun.interval(2.0, width)
    k = len(logs)
    own = float(np.var(logs, ddof=1))
    moderated = (rerun.PRIOR_DOF * prior + (k - 1) * own) / (rerun.PRIOR_DOF + k - 1)
    assert rerun.standard_error2(low, high, k) == pytest.approx(moderated * math.pi / (2 * k + 1), rel=1e-6)
    wide_low, wide_high = rerun.widened(2.0, low, high, v)
    assert math.log(wide_high / wide_low) / 2 == pytest.approx(math.sqrt(width**2 + 2 * rerun.Z**2 * v), rel=1e-9)
    assert wide_low * wide_high == pytest.approx(4.0)  # around the figure


def _processes(folder: str, factor: float, moved: tuple[str, ...]) -> str:
    """Each timed record of ``folder`` as if timed in three processes at 0.99, 1 and 1.01 times its time, the
    ``moved`` models' ``factor`` times slower (the RNN's alone: a run in which the machine moved one model's cases
    against the other's)."""
    cases = os.path.join(folder, "cases")
    for name in os.listdir(cases):
        path = os.path.join(cases, name)
        rec = json.load(open(path))
        if rec.get("status") != "ok" or "time_median_s" not in rec:
            continue
        median = rec["time_median_s"] * (factor if rec["params"]["model"] in moved else 1.0)
        rounds = [{"median_s": median * f, "q25_s": median * f, "q75_s": median * f, "started_at": rec["started_at"]}
                  for f in (0.99, 1.0, 1.01)]
        rec.update(rounds=rounds, processes=3, time_median_s=median, time_low_s=median * 0.99,
                   time_high_s=median * 1.01, time_q25_s=median * 0.995, time_q75_s=median * 1.005,
                   time_iqr_s=median * 0.01, time_best_round_s=median * 0.99, modes=None, samples=3,
                   **{rate: rec[count] / median for rate, count in records.RATES if rec.get(rate) is not None})
        if rec.get("fraction_of_peak") is not None:
            rec["fraction_of_peak"] = rec["achieved_flops_per_s"] / rec["gemm_peak_flops_per_s"]
        write_json_atomic(path, rec)
    return folder


def _runs(tmp_path, factors, moved=("rnn-width",)) -> list[str]:
    first = measured_run(tmp_path / "measured")
    folders = []
    for i, factor in enumerate(factors):
        shutil.copytree(first, tmp_path / f"run{i}")
        folders.append(_processes(str(tmp_path / f"run{i}"), factor, moved))
    return folders


def _figures(name, **own):
    """A run's figures as ``reproduce.figures`` gives them, each (value, low, high) the run's own."""
    return {"run": name, "machine": "vm", "cpu": "EPYC", "commit": "abc", "own": own, "figures": own, "quoted": []}


def test_the_variance_between_runs_is_what_a_groups_figures_moved_beyond_what_each_run_said_of_them():
    runs = [_figures(f"r{i}", **{"c1_threads.speedup_a": (v, v * 0.98, v / 0.98), "c1_threads.speedup_b": (w, w * 0.97,
                                 w / 0.97), "c3_heads.paired_time_ratio_x": (p, p * 0.95, p / 0.95),
                                 "c3_heads.time_ratio_x": (2.0, 1.9, 2.1), "c1_depth.slope": (31.0, None, None)})
            for i, (v, w, p) in enumerate([(1.0, 2.0, 4.0), (1.2, 2.1, 4.02), (0.9, 1.9, 3.98)])]
    moved = reproduce.between_runs(runs)
    expected = np.mean([np.var(np.log(xs), ddof=1) - rerun.standard_error2(x * f, x / f, 3)
                        for xs, f in (((1.0, 1.2, 0.9), 0.98), ((2.0, 2.1, 1.9), 0.97)) for x in [xs[0]]])
    assert moved["variance"]["c1_threads"] == pytest.approx(expected) and moved["figures"]["c1_threads"] == 2
    # the paired ratio moved less than its runs said: nothing beyond; the grid's one stood still; no interval: none
    assert moved["variance"]["c3_heads.paired"] == 0.0 and moved["variance"]["c3_heads"] == 0.0
    assert "c1_depth" not in moved["variance"] and moved["runs"] == ["r0", "r1", "r2"]
    assert "c1_threads ±" in reproduce.show_between(moved)
    with pytest.raises(ValueError, match="three runs or more; got 2"):
        reproduce.between_runs(runs[:2])


def test_a_count_takes_no_part_in_its_groups_variance_between_runs_and_gets_none_added():
    """A count's interval is a count's (10 of 12: 5.8-12), far wider than what its group's ratios say of themselves:
    in the group's mean it would cancel what moved them."""
    ratios, counted = (1.02, 0.98, 1.016), (10, 8, 10)
    runs = [{**_figures(f"r{i}", **{"profiling.overhead_ratio": (r, r * 0.98, r / 0.98),
                                    "profiling.within": (c, c * 0.58, 12.0)}), "counts": ["profiling.within"]}
            for i, (r, c) in enumerate(zip(ratios, counted, strict=True))]
    moved = reproduce.between_runs(runs)
    expected = np.var(np.log(ratios), ddof=1) - np.mean([rerun.standard_error2(r * 0.98, r / 0.98, 3) for r in ratios])
    assert expected > 0 and moved["variance"]["profiling"] == pytest.approx(expected)
    assert moved["figures"]["profiling"] == 1
    a = Analysis("profiling", "t", "P", "")
    a.numbers.update(within=10, overhead_ratio=1.02)
    a.caps["within"] = 12
    token = BETWEEN.set({"profiling": 0.01})
    try:
        assert a.interval("within", 5.8, 12.0) == (5.8, 12.0)
        assert a.interval("overhead_ratio", 1.0, 1.04) == pytest.approx(rerun.widened(1.02, 1.0, 1.04, 0.01))
    finally:
        BETWEEN.reset(token)


def test_batches_of_runs_are_pooled_by_their_degrees_of_freedom_and_a_batch_measured_again_replaces_itself(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_BENCH_CACHE", str(tmp_path))
    facts = {"hostname": "vm", "cpu_model": "EPYC", "cpu_count": 2, "gpu_name": None}

    def batch(names, excess, figures=2):
        return {"runs": names, "excess": {"c1_length": excess}, "dof": {"c1_length": figures * (len(names) - 1)},
                "figures": {"c1_length": figures}, "variance": {"c1_length": max(0.0, excess)}}

    between_runs.save(facts, batch(["a1", "a2", "a3"], 0.004))
    between_runs.save(facts, batch(["b1", "b2", "b3", "b4"], -0.001))  # 6 dof against the first's 4
    kept = between_runs.load(facts)
    assert kept["variance"]["c1_length"] == pytest.approx((0.004 * 4 - 0.001 * 6) / 10)
    assert kept["batches"] == 2 and kept["runs"] == [os.path.realpath(r) for r in ("a1", "a2", "a3", "b1", "b2", "b3",
                                                                                   "b4")]
    again = [os.path.join(".", r) for r in ("b1", "b2", "b3", "b4")]  # measured again, named by another path
    between_runs.save(facts, batch(again, -0.01))  # the batch replaced
    kept = between_runs.load(facts)
    assert kept["batches"] == 2 and kept["variance"]["c1_length"] == 0.0  # (0.016 - 0.06) / 10, held at 0
    assert between_runs.pooled([batch(["a1", "a2", "a3"], 0.004)])["variance"] == {"c1_length": 0.004}
    for name in ("c1", "c2", "c3"):  # run folders, then the same folders through links
        (tmp_path / name).mkdir()
        (tmp_path / f"link-{name}").symlink_to(tmp_path / name)
    between_runs.save(facts, batch([str(tmp_path / n) for n in ("c1", "c2", "c3")], 0.004))
    between_runs.save(facts, batch([str(tmp_path / f"link-{n}") for n in ("c1", "c2", "c3")], 0.002))
    kept = between_runs.load(facts)
    assert kept["batches"] == 3 and kept["runs"][-3:] == [str((tmp_path / n).resolve()) for n in ("c1", "c2", "c3")]
    for n in ("c1", "c2", "c3"):  # copies of run folders are the same runs: their batch replaces the originals'
        (tmp_path / n / "machine.json").write_text(json.dumps({"name": "vm", "calibrations": [{"at": n}]}))
        shutil.copytree(tmp_path / n, tmp_path / f"copy-{n}")
    between_runs.save(facts, batch([str(tmp_path / n) for n in ("c1", "c2", "c3")], 0.004))
    between_runs.save(facts, batch([str(tmp_path / f"copy-{n}") for n in ("c1", "c2", "c3")], 0.002))
    kept = between_runs.load(facts)
    assert kept["batches"] == 3 and kept["runs"][-3:] == [str(tmp_path / f"copy-{n}") for n in ("c1", "c2", "c3")]


def test_an_analysis_adds_its_groups_variance_between_runs_to_the_interval_it_sets():
    a = Analysis("c3_heads", "t", "C3", "")
    a.numbers.update(time_ratio_x=2.0, paired_time_ratio_x=2.0)
    assert a.interval("time_ratio_x", 1.9, 2.1) == (1.9, 2.1)  # nothing measured between runs
    token = BETWEEN.set({"c3_heads": 0.01})
    try:
        assert a.interval("time_ratio_x", 1.9, 2.1) == pytest.approx(rerun.widened(2.0, 1.9, 2.1, 0.01))
        assert a.interval("paired_time_ratio_x", 1.9, 2.1) == (1.9, 2.1)  # its own group: none measured
    finally:
        BETWEEN.reset(token)
    assert a.intervals["time_ratio_x"] == pytest.approx(rerun.widened(2.0, 1.9, 2.1, 0.01))


def test_reproduce_keeps_it_for_the_machine_and_the_machines_next_run_adds_it_to_its_answers(
        tmp_path, capsys, fake_peaks, monkeypatch):
    monkeypatch.setenv("ATTENTION_BENCH_CACHE", str(tmp_path / "cache"))
    folders = _runs(tmp_path, (1.0, 1.3, 0.75))  # the RNN's cases moved: the C1 speed-up with them
    assert attention_bench(["reproduce", *folders, "--record", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "Between these runs, beyond each run's own intervals" in out and "c1_length ±" in out, out[-1500:]
    facts = json.load(open(os.path.join(folders[0], "machine.json")))["machine"]
    kept = between_runs.load(facts)
    assert kept["variance"]["c1_length"] > 0 and kept["runs"] == folders and kept["batches"] == 1
    record = json.load(open(tmp_path / "r.json"))
    assert record["between_runs"]["variance"] == kept["variance"] and [r["added"] for r in record["runs"]] == [{}] * 3
    said = measured.markdown(record, "r.json")
    assert "The runs' intervals are their own" in said and "Between these runs, beyond each run's own" in said
    added = {**record, "runs": [{**r, "added": {"c1_length": 0.01}} for r in record["runs"]]}
    assert "Each run's answers added the variance between runs kept for the machine before it (c1_length ±" in (
        measured.markdown(added, "r.json"))
    assert between_runs.load({**facts, "cpu_model": "another CPU"}) is None  # kept for that machine only

    # the next run of this machine copies it into its machine.json; the answers' intervals add it
    monkeypatch.setattr(machine, "metadata", lambda: facts)
    run = _runs(tmp_path / "next", (1.0,))[0]
    os.remove(os.path.join(run, "machine.json"))
    from benchmarks.core.running import runner

    runner.Runner(run, min_run_time=0.01, name="vm").calibrate([])
    assert json.load(open(os.path.join(run, "machine.json")))["between_runs"]["variance"] == kept["variance"]
    got = reproduce.figures(run)
    key = "c1_length.speedup_cpu_tiny_n16"
    value, low, high = got["own"][key]
    assert got["figures"][key][1:] == pytest.approx(rerun.widened(value, low, high, kept["variance"]["c1_length"]))
    wide = {a.key: a for a in run_all(tidy.load([run]), "vm")}["c1_length"].intervals["speedup_cpu_tiny_n16"]
    assert wide == pytest.approx(got["figures"][key][1:])  # the page states what reproduce checks
    page = open(publish.build([run], str(tmp_path / "report"))).read()
    assert "It includes what moved between 3 runs of this machine (attention-bench reproduce," in page


def test_a_page_without_it_says_so(tmp_path, fake_peaks):
    run = measured_run(tmp_path / "run")
    page = open(publish.build([run], str(tmp_path / "report"))).read()
    assert "Not included: what moves between this machine&#39;s runs" in page
