"""The performance model through a run: constants stored with the machine, every timed case predicted in the
tidy table (``predicted_time`` with its ``bound``) from its operators and the constants only, the validation
and roofline on the page, and ``attention-bench predict`` for another machine."""

from __future__ import annotations

import glob
import json
import math
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from run_helpers import ROOT, in_process, measure, quick_measuring

from attention_bench.cli import main
from benchmarks import cases
from benchmarks.core import records
from benchmarks.core.hardware import perfmodel
from benchmarks.core.timing import rerun
from reports import predict, tidy
from reports.analyses import c2_roofline, prediction
from reports.analyses.prediction import crossover_curves, pairs, where_overtakes
from reports.analyses.runs import latest

PLAN = [("attention", {"seq_len": 128, "d_head": 64, "backend": backend, "causal": False, "dtype": "float32",
                       "device": "cpu"}) for backend in ("math", "sdpa")] + [
    ("multihead", {"heads": heads, "strategy": "batched", "out_proj": True, "device": "cpu"}) for heads in (1, 8)] + [
    ("models", {"model": model, "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"})
    for model in ("transformer", "rnn-width")]
SHEET = os.path.join(ROOT, "docs", "machines", "h100-sxm.json")
TIMED = sum(len(cases.METHODS[area]) for area, _ in PLAN)  # a record per method of each case


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    with quick_measuring():
        return measure(tmp_path_factory.mktemp("prediction") / "run", PLAN)


def test_the_run_keeps_its_constants_and_each_case_its_operators(run):
    saved = json.load(open(os.path.join(run, "machine.json")))
    assert "cpu/float32/2" in saved["constants"] or saved["constants"]
    for path in glob.glob(os.path.join(run, "cases", "*.json")):
        rec = json.load(open(path))
        assert rec["ops"] and sum(op["flops"] * op["count"] for op in rec["ops"]) > 0
        assert set(rec["dispatches"]) <= set(perfmodel.OPTIONAL_OVERHEADS) and rec["dispatches"]["line"] > 0


def test_every_timed_case_is_predicted_with_its_bound(run):
    t = tidy.load([run])
    predicted = t[t.metric == "predicted_time"]
    assert len(predicted) == len(t[t.metric == "time"]) == TIMED
    assert predicted.bound.isin(perfmodel.BOUNDS).all() and (predicted.value > 0).all()
    constants = t[t.area == "constants"]
    assert {"gemm", "attention", "stream_copy", "op", "view"} <= set(constants.method)


def test_the_prediction_reads_no_case_timing(run, tmp_path):
    before = tidy.load([run])
    copy = str(tmp_path / "copy")
    shutil.copytree(run, copy)
    for path in glob.glob(os.path.join(copy, "cases", "*.json")):
        rec = json.load(open(path))
        for r in [rec, *rec["rounds"]]:  # every time ten times longer, and the rates that follow from them
            for key in ("time_median_s", "time_q25_s", "time_q75_s", "time_iqr_s", "median_s", "q25_s", "q75_s"):
                if key in r:
                    r[key] *= 10
        for key in ("achieved_flops_per_s", "tokens_per_s", "fraction_of_peak"):
            rec[key] /= 10
        json.dump(rec, open(path, "w"))
    assert not [p for p in glob.glob(os.path.join(copy, "cases", "*.json")) if records.problem(json.load(open(p)))]
    after = tidy.load([copy])
    pick = lambda t, m: t[t.metric == m].sort_values(["area", "method", "seq_len", "heads", "model"]).value.values  # noqa: E731
    assert pick(after, "predicted_time") == pytest.approx(pick(before, "predicted_time"))
    assert pick(after, "time") == pytest.approx(10 * pick(before, "time"))


def test_each_prediction_is_set_at_its_cases_speed_by_the_control_timed_around_it(run, tmp_path):
    """A case timed while the host ran at half the speed it had through the constants' calibration (its control
    GEMM at half their control's rate) is predicted twice as long; constants without a control leave each
    prediction as the operators and the constants price it."""
    before = tidy.load([run])
    speeds = before[before.metric == "predicted_speed"]
    assert len(speeds) == TIMED and (speeds.value > 0).all()
    copy = str(tmp_path / "halved")
    shutil.copytree(run, copy)
    for path in glob.glob(os.path.join(copy, "cases", "*.json")):
        rec = json.load(open(path))
        for r in [rec, *rec["rounds"]]:
            r["control_flops_per_s"] /= 2
        json.dump(rec, open(path, "w"))
    pick = lambda t, m: t[t.metric == m].sort_values(["area", "method", "seq_len", "heads", "model"]).value.values  # noqa: E731
    halved = tidy.load([copy])
    assert pick(halved, "predicted_time") == pytest.approx(2 * pick(before, "predicted_time"))
    assert pick(halved, "predicted_speed") == pytest.approx(pick(before, "predicted_speed") / 2)
    assert "Each prediction is at its case's speed" in prediction.analyse(latest(halved)).verdict
    meta = os.path.join(copy, "machine.json")
    saved = json.load(open(meta))
    for c in saved["constants"].values():
        del c["control_flops_per_s"]
    json.dump(saved, open(meta, "w"))
    unset = tidy.load([copy])
    assert (unset.metric == "predicted_speed").sum() == 0
    unscaled = pick(before, "predicted_time") * pick(before, "predicted_speed")  # the operators' price alone
    assert pick(unset, "predicted_time") == pytest.approx(unscaled)


def test_the_page_validates_the_model_per_area_and_draws_the_roofline(run):
    t = latest(tidy.load([run]))
    p = pairs(t)
    assert len(p) == TIMED and (p.ratio > 0).all()
    a = prediction.analyse(t)
    errors = a.tables["errors"]
    assert set(errors.index.get_level_values("area")) == {"attention", "multihead", "models", "all"}
    assert errors.loc[("all", "all", ""), "cases"] == len(p)
    assert f"Over {len(p)} timed cases the model's median error is" in a.verdict and "Worst:" in a.verdict
    assert [f.kind for f in a.figures] == ["scatter"] and len(a.tables["worst"]) == 5
    assert set(a.tables["heads"].index) == {"batched"}
    roof = c2_roofline.analyse(t)
    fig = next(f for f in roof.figures if f.kind == "scatter")
    assert fig.roof[0] > 0 and fig.roof[1] > 0 and "ceiling" in roof.verdict


def test_the_page_says_how_far_the_runs_gemm_peak_is_from_its_constants(run):
    """Cached constants describe the machine on the day they were measured: the verdict sets the run's calibrated
    GEMM peak against their GEMM rate, and a run on a machine half as fast says half."""
    t = tidy.load([run])
    slower = t.assign(value=t.value.where(t.metric != "gemm_peak_flops_per_s", t.value / 2))
    before, after = prediction.analyse(t), prediction.analyse(slower)
    ratio, halved = (prediction.peak_over_constants(a.tables["constants"]) for a in (before, after))
    assert len(ratio) and list(ratio.index) == list(halved.index)
    assert halved.to_numpy() == pytest.approx(ratio.to_numpy() / 2)
    for a, r in ((before, ratio), (after, halved)):
        said = ", ".join(f"{prediction._at(at)} {v:.2f}×" for at, v in r.items())
        assert f"best GEMM rate: {said} (below 1: the machine ran slower" in a.verdict


def test_predict_prints_every_case_as_predicted(run, capsys, tmp_path):
    csv = str(tmp_path / "h100.csv")
    assert main(["predict", SHEET, run, "--csv", csv]) == 0
    out = capsys.readouterr().out.splitlines()
    cases = [line for line in out if not line.startswith("#") and "predicted" in line]
    assert out[0] == "# predicted from h100-sxm.json, not measured"
    assert len([c for c in cases if c.endswith("predicted, not measured")]) == TIMED
    assert [line.split(": ")[1] for line in out if "heads / 1 head" in line] == ["8 heads / 1 head at equal FLOPs"] * 2
    assert open(csv).read().count("predicted from h100-sxm.json") == TIMED


def test_a_bad_datasheet_is_one_line_naming_the_field(run, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"peak_flops_per_s": 1e12, "bandwidth_bytes_per_s": 0, "op_overhead_s": 1e-6}))
    code, err = in_process(capsys, "predict", str(bad), run)
    assert code == 2 and err.strip() == ("error: bad.json: bandwidth_bytes_per_s is 0; give a positive number "
                                         "(every one of peak_flops_per_s, bandwidth_bytes_per_s, op_overhead_s is "
                                         "needed)")
    code, err = in_process(capsys, "predict", SHEET, str(tmp_path / "none"))
    assert code == 2 and "no such run folder" in err


def test_the_crossover_is_placed_predicted_and_measured_or_the_winner_named():
    n = [16, 64, 128]
    rnn = {"measured": [1.0, 1.5, 4.0], "predicted": [1.0, 3.0, 5.0]}  # the Transformer takes 2.0 throughout
    p = pd.DataFrame([{"area": "models", "method": "forward", "preset": "paper-base", "model": model, "seq_len": s,
                       **{k: 2.0 if model == "transformer" else v[i] for k, v in rnn.items()}}
                      for i, s in enumerate(n) for model in ("transformer", "rnn-width")])
    curves, cross = crossover_curves(p, "measured")
    assert 64 < cross < 128 and list(curves.index) == n  # the RNN faster up to 64, slower at 128
    assert 16 < crossover_curves(p, "predicted")[1] < 64
    flat = p.assign(measured=p.measured.where(p.model == "transformer", 1.0))
    curves, cross = crossover_curves(flat, "measured")
    assert cross is None and where_overtakes(cross, curves) == "nowhere in n = 16..128 (the RNN faster throughout)"


def _retimed(run: str, out: str, factor: float) -> str:
    """A copy of ``run`` whose every timed case took ``factor`` times as long (its rates with it, and its GEMM peak
    too, so that its fraction of peak stays what was measured)."""
    shutil.copytree(run, out)
    for path in glob.glob(os.path.join(out, "cases", "*.json")):
        rec = records.read_json(path)
        if rec.get("status") != "ok" or "time_median_s" not in rec:
            continue
        rec.update({k: v * factor for k, v in rec.items() if k.startswith("time_") and k.endswith("_s")})
        rec["rounds"] = [{**r, **{k: r[k] * factor for k in ("median_s", "q25_s", "q75_s")}} for r in rec["rounds"]]
        rec.update({rate: rec[count] / rec["time_median_s"] for rate, count in records.RATES
                    if rec.get(rate) is not None})
        if rec.get("gemm_peak_flops_per_s") is not None:
            rec["gemm_peak_flops_per_s"] /= factor
        records.write_json_atomic(path, rec)
    return out


def test_constants_that_mispredict_their_own_run_are_said_with_every_prediction(run, capsys, tmp_path):
    """Whether a run's constants predict its cases depends on the load each was measured under, so the run here
    is made to agree with its constants: its times set to what they predict at the median case."""
    together = _retimed(run, str(tmp_path / "together"), predict.own_factor(run))
    assert predict.own_factor(together) == pytest.approx(1.0) and predict.self_check(together) is None
    slow = str(tmp_path / "slow")
    shutil.copytree(together, slow)
    saved = records.read_json(os.path.join(slow, "machine.json"))
    for c in saved["constants"].values():  # host costs as a busy machine read them: 300x each dispatch, and 300x
        c["overhead_s"] = {k: v * 300 for k, v in c["overhead_s"].items()}  # the host workload's time, of which a
        for host in c["host"].values():  # Python line's cost is the rest (else a line's cost took back what the
            host["seconds"] *= 300  # dispatches gained, as it did under load, and the prediction hardly moved)
    records.write_json_atomic(os.path.join(slow, "machine.json"), saved)
    warning = predict.self_check(slow)
    assert warning and "own constants predict its own cases" in warning and "busy machine" in warning
    assert main(["predict", SHEET, slow]) == 0
    assert "# note: WARNING: " + warning in capsys.readouterr().out


def _cases(width: float, n: int = 60) -> pd.DataFrame:
    """Timed cases whose prediction is 10% off either way, each measured time with a rerun interval of
    +-``width`` (0: none)."""
    rng = np.random.default_rng(3)
    measured = np.exp(rng.normal(-4, 1, n))
    rows = pd.DataFrame({"measured": measured, "predicted": measured * np.where(np.arange(n) % 2, 1.1, 0.9)
                         * np.exp(rng.normal(0, 0.05, n))})
    if width:
        rows["low"], rows["high"] = measured * math.exp(-width), measured * math.exp(width)
    return rows


def test_the_models_errors_carry_the_spread_their_cases_measurement_errors_give_them():
    assert prediction.error_draws(_cases(0)) is None  # no measured interval: nothing to draw from
    (narrow, k), (wide, _) = prediction.error_draws(_cases(0.02)), prediction.error_draws(_cases(0.2))
    assert k is None  # a draw per case: no processes resampled
    spread = lambda d: np.std(np.log(d[:, 0]))  # noqa: E731 (the median error's log spread)
    assert 0 < spread(narrow) < spread(wide)
    assert prediction.error_draws(_cases(0.02))[0].tolist() == narrow.tolist()  # seeded: one table, one interval
    # a rerun of the cases (each time redrawn at its interval's error) lands inside the stated interval
    cases_, se = _cases(0.1), 0.1 / (rerun.t_quantile(0.975, 6) * math.sqrt(2))
    stated = rerun.from_draws(np.median(np.abs(cases_.predicted / cases_.measured - 1)),
                              prediction.error_draws(cases_)[0][:, 0])
    rng, inside = np.random.default_rng(4), []
    for _ in range(200):
        rerun_measured = cases_.measured * np.exp(rng.normal(0, se * math.sqrt(2), len(cases_)))
        inside.append(stated[0] <= np.median(np.abs(cases_.predicted / rerun_measured - 1)) <= stated[1])
    assert np.mean(inside) >= 0.9


def _timed_in_processes(rng, truth, predicted, shift=0.1, own=0.02, processes=3) -> pd.DataFrame:
    """A run whose every process moves all of its cases together (a log shift of sd ``shift`` each) beside each
    case's own noise (sd ``own``): each case's time in each process, their median, their range."""
    moved = rng.normal(0, shift, processes)[None, :] + rng.normal(0, own, (len(truth), processes))
    per = truth[:, None] * np.exp(moved)
    return pd.DataFrame({"measured": np.median(per, axis=1), "predicted": predicted, "low": per.min(axis=1),
                         "high": per.max(axis=1), "process_times": [tuple(row) for row in per]})


def test_the_models_errors_resample_whole_processes_whose_cases_move_together():
    """Each draw takes whole processes, the same for every case: where each process ran every case at its own speed
    (1, 1.2 and 1.5 times the truth, which the model predicts exactly), every case of a draw is off by the same
    factor, so its median error is its 90th percentile, and only the medians of three such speeds occur. Where each
    of a run's processes shifts all of its cases at once, beside each case's own noise, the interval holds a rerun's
    figure about as often as it says (at Z instead of Student's t at 2 degrees of freedom: 89%)."""
    truth = np.exp(np.random.default_rng(5).normal(-4, 1, 60))
    run = pd.DataFrame({"measured": truth * 1.2, "predicted": truth,
                        "process_times": [(t, 1.2 * t, 1.5 * t) for t in truth]})
    draws, k = prediction.error_draws(run)
    assert k == 3 and np.allclose(draws[:, 0], draws[:, 1], rtol=1e-12)
    assert set(np.round(draws[:, 0], 9)) <= {0.0, round(1 - 1 / 1.2, 9), round(1 - 1 / 1.5, 9)}
    assert len(set(np.round(draws[:, 0], 9))) == 3
    rng = np.random.default_rng(6)
    predicted = truth * np.where(np.arange(60) % 2, 1.15, 0.9) * np.exp(rng.normal(0, 0.05, 60))
    figure = lambda t: np.median(np.abs(t.predicted / t.measured - 1))  # noqa: E731
    inside = []
    for _ in range(150):
        run, rerun_ = (_timed_in_processes(rng, truth, predicted) for _ in range(2))
        draws, k = prediction.error_draws(run)
        low, high = rerun.from_draws(figure(run), draws[:, 0], k)
        inside.append(low <= figure(rerun_) <= high)
    assert np.mean(inside) >= 0.93


def test_timed_cases_at_a_thread_count_without_constants_are_named_as_not_predicted(run):
    t = tidy.load([run])
    assert "Not predicted" not in prediction.analyse(t).verdict
    timed = t[(t.metric == "time") & (t.area == "models")].head(1)
    other = int(timed.threads.iloc[0]) + 1  # a strong-scaling case at a count the run measured no constants at
    a = prediction.analyse(pd.concat([t, timed.assign(threads=other)], ignore_index=True))
    assert f"Not predicted: 1 timed case at {other} threads" in a.verdict and a.numbers["cases"] == TIMED


def test_the_goal_is_met_or_not_only_where_the_errors_intervals_say_so():
    from reports.analyses.base import Analysis

    def said(median, p90):
        a = Analysis("prediction", "", "model", "", numbers={"median_error": median[0], "p90_error": p90[0]})
        a.intervals = {k: v[1:] for k, v in (("median_error", median), ("p90_error", p90)) if len(v) > 1}
        return prediction.against_goal(a)

    goal_m, goal_p = prediction.TARGET_MEDIAN, prediction.TARGET_P90
    assert said((goal_m - 0.03, goal_m - 0.05, goal_m - 0.01), (goal_p - 0.1, goal_p - 0.2, goal_p)) == "met"
    assert said((goal_m + 0.03, goal_m + 0.01, goal_m + 0.05), (goal_p - 0.1,)) == "not met"
    assert said((goal_m - 0.03, goal_m - 0.05, goal_m - 0.01), (goal_p + 0.1, goal_p + 0.05, goal_p + 0.2)) == "not met"
    # a figure on the right side of the goal whose interval holds it: a rerun may read the other side
    got = said((goal_m - 0.001, goal_m - 0.01, goal_m + 0.01), (goal_p - 0.1, goal_p - 0.2, goal_p - 0.05))
    assert got == "undecided: the median's interval (14%-16%) holds 15%: a rerun may read either side"
    assert said((goal_m + 0.001, goal_m - 0.01, goal_m + 0.01), (goal_p - 0.1,)).startswith("undecided")
    assert said((goal_m - 0.01,), (goal_p + 0.01,)) == "not met"  # no intervals: the figures themselves
