"""Records validated on read (benchmarks.core.records.problem): a record that cannot be right is set aside and
measured again by the runner, named and not counted by the report, and no rate is taken on trust."""

from __future__ import annotations

import json
import math
import os

import pytest
from run_helpers import PLAN, measured_run
from test_tidy import write_asv_results

from attention_bench.cli import main as attention_bench
from benchmarks.core import records
from benchmarks.core.running import runner
from reports import tidy
from reports.analyses import runs as run_list

#: (what is done to a timed record, the words that say why it cannot be right)
DAMAGE = [
    ({"time_median_s": "fast"}, "time_median_s is 'fast', not a finite number"),
    ({"time_median_s": -0.01, "time_q25_s": -0.02}, "time_median_s is -0.01, not a positive time"),
    ({"time_median_s": math.inf}, "time_median_s is inf, not a finite number"),
    ({"time_median_s": math.nan}, "time_median_s is nan, not a finite number"),
    ({"time_median_s": 0.0, "time_q25_s": 0.0}, "time_median_s is 0.0, not a positive time"),
    ({"status": "weird"}, "status 'weird' is not one of ok, skipped, oom, failed"),
    ({"params": None}, "params is None, not a dict"),
    ({"achieved_flops_per_s": 1e15}, "achieved_flops_per_s 1e+15 is not matmul_flops / time_median_s"),
    ({"tokens_per_s": 1.0}, "tokens_per_s 1 is not tokens / time_median_s"),
    ({"time_q75_s": 0.0}, "quartiles are out of order"),
    ({"ops": [{"name": "aten.mm.default", "flops": "many"}]}, "ops is not a list of operators, each with exactly"),
    ({"ops": [{"name": "aten.mm.default", "flops": -1, "bytes": 8, "shape": [], "written": 4, "count": 1}]},
     "counts must be whole numbers, none negative"),
    ({"dispatches": {"view": -3}}, "dispatches is {'view': -3}, not counts of views"),
]


@pytest.fixture
def copy(tmp_path):
    """A short run of its own for each test to damage (``run_helpers.measured_run``: measured once, copied)."""
    return measured_run(tmp_path / "run")


def damaged(run: str, change: dict) -> str:
    """Apply ``change`` to the run's first case record (the transformer's forward); its path."""
    path = sorted(os.path.join(run, "cases", n) for n in os.listdir(os.path.join(run, "cases")))[0]
    with open(path) as f:
        rec = json.load(f)
    rec.update(change)
    with open(path, "w") as f:
        json.dump(rec, f)
    return path


def test_the_records_a_run_writes_pass_the_check(tmp_path, fake_peaks):
    run = measured_run(tmp_path / "run")
    checked = [records.problem(records.read_json(os.path.join(run, "cases", n)))
               for n in os.listdir(os.path.join(run, "cases"))]
    assert checked and checked == [None] * len(checked)
    assert records.peaks_problem(records.read_json(os.path.join(run, "machine.json"))) is None


@pytest.mark.parametrize("change,why", DAMAGE, ids=[w.split(" ")[0] + "-" + str(i) for i, (_, w) in enumerate(DAMAGE)])
def test_a_record_that_cannot_be_right_is_named_and_not_counted(change, why, copy):
    run = copy
    path = damaged(run, change)
    assert why in records.problem(records.read_json(path))
    t = tidy.load([run])
    bad = t[t.status == "invalid"]
    assert len(bad) == 1 and why in bad.reason.iloc[0] and os.path.basename(path) in bad.reason.iloc[0]
    assert bad.area.iloc[0] == "models" and math.isnan(bad.value.iloc[0])
    ok_rates = t[(t.status == "ok") & t.metric.isin(["achieved_flops_per_s", "tokens_per_s", "time"])]
    assert (ok_rates.value > 0).all() and ok_rates.value.map(math.isfinite).all()


# the page and the runner act on records.problem's answer, whatever the damage: one damage to a time, one to
# the operators
@pytest.mark.parametrize("change,why", [DAMAGE[0], DAMAGE[10]], ids=["time", "ops"])
def test_an_invalid_record_is_said_on_the_page_and_measured_again(tmp_path, fake_peaks, capsys, change, why, copy):
    run = copy
    path = damaged(run, change)
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert f"warning: invalid record, not counted: {path}: " in err and why in err
    page = open(tmp_path / "r" / "index.html").read()
    assert "1 invalid records not counted" in page and os.path.basename(path) in page

    r = runner.Runner(run, min_run_time=0.01, name="vm")
    counts = r.run(PLAN, progress=False)
    assert counts["ok"] == 1 and counts["resumed"] == 1  # measured again, only it
    assert records.problem(records.read_json(path)) is None
    assert why in capsys.readouterr().err and len(os.listdir(os.path.join(run, "set-aside"))) == 1


def test_records_of_another_commit_are_named_and_never_counted_as_this_runs(tmp_path, copy, capsys):
    run = copy
    path = damaged(run, {"commit": "f" * 40})
    t = tidy.load([run])
    other = t[t.status == "other commit"]
    assert len(other) == 1 and "measured at commit ffffffff" in other.reason.iloc[0]
    assert set(t.commit.dropna()) == {records.commit()}  # one commit in the table, the folder's
    assert set(run_list.table(t).commit) == {records.short(records.commit())}
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    assert f"warning: other commit record, not counted: {path}" in capsys.readouterr().err


def test_rates_are_derived_from_the_time_never_read_from_the_record(copy):
    run = copy
    stored = records.read_json(damaged(run, {}))["achieved_flops_per_s"]
    path = damaged(run, {"achieved_flops_per_s": stored * (1 + 1e-7)})  # within the check's tolerance
    rec = records.read_json(path)
    assert records.problem(rec) is None
    t = tidy.load([run])
    row = t[(t.area == rec["area"]) & (t.model == rec["params"]["model"]) & (t.method == rec["method"])]
    row = row.set_index("metric").value
    assert row["achieved_flops_per_s"] == rec["matmul_flops"] / rec["time_median_s"] != rec["achieved_flops_per_s"]
    achieved = rec["matmul_flops"] / rec["time_median_s"]
    assert row["fraction_of_peak"] == pytest.approx(achieved / rec["gemm_peak_flops_per_s"])


def test_a_damaged_gemm_peak_is_recalibrated_by_the_runner_and_refused_by_the_report(tmp_path, fake_peaks, capsys):
    run = measured_run(tmp_path / "run")
    meta = records.read_json(os.path.join(run, "machine.json"))
    key = next(iter(meta["gemm_peaks"]))
    meta["gemm_peaks"][key] = -1.0
    records.write_json_atomic(os.path.join(run, "machine.json"), meta)
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 2
    assert f"GEMM peak {key!r}: -1.0 is not a positive finite FLOP/s" in capsys.readouterr().err
    runner.Runner(run, min_run_time=0.01, name="vm").run(PLAN, progress=False)
    assert records.read_json(os.path.join(run, "machine.json"))["gemm_peaks"][key] > 0


@pytest.mark.parametrize("bad,why", [(-0.01, "a time of -0.01 s is not positive"),
                                     (0.0, "a time of 0.0 s is not positive")])  # asv stores inf as null
def test_an_asv_time_that_cannot_be_right_is_named_not_counted(tmp_path, bad, why):
    root = str(tmp_path / ".asv" / "results")
    write_asv_results(root, times=(0.012, bad))
    t = tidy.load([root])
    times = t[t.metric == "time"]
    invalid = times[times.status == "invalid"]
    assert len(invalid) == 1 and why in invalid.reason.iloc[0] and "time_forward" in invalid.reason.iloc[0]
    assert list(times[times.status == "ok"].value) == [0.012]
    assert not (t[(t.metric == "tokens_per_s")].value < 0).any()


def test_a_profile_that_cannot_be_right_is_named_and_left_out(tmp_path, fake_peaks, capsys):
    run = measured_run(tmp_path / "run", PLAN[:1])
    wrong = tmp_path / "run" / "profiles" / "models--forward--wrong" / "profile.json"
    wrong.parent.mkdir(parents=True)
    records.write_json_atomic(str(wrong), {"area": "models", "method": "forward", "params": {}, "unprofiled_s": 0.1,
                                           "memory_by_component": {},
                                           "components": [{"component": "attention.softmax", "time_s": -1.0}]})
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert f"{wrong}: component 'attention.softmax': time -1.0 s" in err and "this profile is left out" in err
