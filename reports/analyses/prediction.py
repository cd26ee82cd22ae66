"""The performance model against the run: every timed case predicted from the machine's measured constants
(``benchmarks.core.hardware.perfmodel``: per operator max(FLOPs / kernel rate, bytes / bandwidth) + dispatch
overheads) and compared with its measured time, per area; C1's crossover and the heads ratio predicted
then measured.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from benchmarks import cases
from benchmarks.core.timing import rerun

from .. import tidy
from .base import Analysis, conditions, fmt_ratio, fmt_time, span
from .fits import crossover

#: what good looks like for the model over a run's timed cases: median and 90th percentile of
#: |predicted / measured - 1|
TARGET_MEDIAN, TARGET_P90 = 0.15, 0.40
#: the worst cases named on the page
WORST = 5
#: simulated reruns behind the errors' intervals (``error_draws``)
DRAWS = 400


def pairs(t: pd.DataFrame) -> pd.DataFrame:
    """One row per timed case with a prediction: its axes, ``measured`` and ``predicted`` seconds, the three
    predicted terms, its ``bound``, ``ratio`` (predicted / measured) and, where the run states them, the measured
    time's interval (``low``, ``high``) and its median in each process (``process_times``, in round order)."""
    keys = ["area", "method", *[c for c in tidy.PARAMS if c in t]]
    metrics = ["time", "predicted_time", "predicted_compute", "predicted_memory", "predicted_overhead",
               "predicted_speed"]
    rows = t[t.metric.isin(metrics) & (t.status == "ok")].dropna(subset=["value"])
    if rows.empty or not (rows.metric == "predicted_time").any():
        return pd.DataFrame()
    filled = rows.assign(**{k: rows[k].astype(object).where(rows[k].notna(), "") for k in keys})
    wide = filled.pivot_table(index=keys, columns="metric", values="value", aggfunc="median")
    bound = filled[filled.metric == "predicted_time"].groupby(keys).bound.first()
    timed = filled[filled.metric == "time"].groupby(keys)
    spans = timed[[c for c in ("low", "high") if c in filled]].median()
    if "process_times" in filled:
        spans = spans.join(timed.process_times.first())
    wide = wide.join(bound).join(spans).dropna(subset=["time", "predicted_time"]).reset_index()
    wide = wide.rename(columns={"time": "measured", "predicted_time": "predicted", "predicted_compute": "compute",
                                "predicted_memory": "memory", "predicted_overhead": "overhead",
                                "predicted_speed": "speed"})
    wide["ratio"] = wide.predicted / wide.measured
    wide["device"] = wide.device.where(wide.device != "", "cpu")  # the threads area runs on the CPU only
    return wide


def _unpriced(t: pd.DataFrame) -> dict[float, int]:
    """Timed CPU cases by thread count, at the counts where the run has no prediction at all (no constants)."""
    ok = t[(t.status == "ok") & (t.device.astype(str) != "cuda")]
    timed = ok[ok.metric == "time"].dropna(subset=["threads"])
    priced = set(ok[ok.metric == "predicted_time"].threads.dropna())
    counts = timed.groupby("threads").size()
    return {float(k): int(n) for k, n in counts.items() if k not in priced}


def _label(row) -> str:
    axes = ", ".join(f"{k} {row[k]}" for k in tidy.PARAMS if k in row and row[k] != "" and k != "device")
    return f"{row['area']} {row['method']} ({axes})"


def _errors(p: pd.DataFrame) -> pd.DataFrame:
    err = (p.ratio - 1).abs()
    g = p.assign(err=err).groupby(["device", "area", "method"])
    table = pd.DataFrame({"cases": g.size(), "median_error": g.err.median(), "p90_error": g.err.quantile(0.9),
                          "median_ratio": g.ratio.median()})
    table.loc[("all", "all", ""), :] = [len(p), err.median(), err.quantile(0.9), p.ratio.median()]
    table["cases"] = table.cases.astype(int)
    return table


def error_draws(p: pd.DataFrame, draws: int = DRAWS) -> tuple[np.ndarray, int | None] | None:
    """The model's median and 90th-percentile error over the cases, ``draws`` times, and how many processes each
    draw resampled. Where the cases were timed in several processes (``process_times``: the run's rounds, each a
    process that timed every case), each draw takes that many of the processes with replacement, the same ones for
    every case, and each case's median over them: a process moves all of its cases together (its allocator's state,
    its place on the cores, the host meanwhile), which a draw per case would average away over the cases; the
    spread of k processes' draws reads low by sqrt((k - 1) / k) (``rerun.from_draws`` scales it back). Otherwise
    each case's measured time is drawn from its interval (log-normal at the standard error the interval states,
    ``rerun.standard_error2``; a case without one as measured). None where no case has either. Seeded: one run's
    table gives one interval."""
    rng = np.random.default_rng(0)
    times = [t if isinstance(t, tuple) else () for t in (p["process_times"] if "process_times" in p else ())]
    counts = [len(t) for t in times if len(t) > 1]
    if counts:
        k = int(np.median(counts))  # the run's rounds: the processes every case was timed in
        per = np.array([(t + (np.nan,) * k)[:k] if len(t) > 1 else (np.nan,) * k for t in times], float)
        with warnings.catch_warnings():  # a case timed in one process only: all NaN, its time as measured (below)
            warnings.simplefilter("ignore", RuntimeWarning)
            picked = np.nanmedian(per[:, rng.integers(0, k, (draws, k))], axis=2).T  # (draws, cases)
        measured = np.where(np.isnan(picked), p.measured.to_numpy(), picked)
        clusters = k
    elif "low" in p and not p.low.isna().all():
        se = np.sqrt([rerun.standard_error2(lo, hi, 3) if lo == lo and lo > 0 else 0.0 for lo, hi in zip(
            p.low, p.high, strict=True)])
        measured = p.measured.to_numpy() * np.exp(rng.standard_normal((draws, len(p))) * se)
        clusters = None
    else:
        return None
    err = np.abs(p.predicted.to_numpy() / measured - 1)
    return np.stack([np.median(err, axis=1), np.quantile(err, 0.9, axis=1)], axis=1), clusters


def against_goal(a: Analysis) -> str:
    """Whether the model's errors meet the goal (TARGET_MEDIAN, TARGET_P90): "met" where each figure's interval (where
    a rerun's figure lands) lies at or under its goal, "not met" where one lies above, else "undecided" naming the
    intervals that hold their goal, whose reruns read either side of it."""
    held = []
    for key, goal in (("median_error", TARGET_MEDIAN), ("p90_error", TARGET_P90)):
        low, high = a.intervals.get(key, (a.numbers[key],) * 2)
        if low > goal:
            return "not met"
        if high > goal:
            held.append(f"the {'median' if key == 'median_error' else '90th percentile'}'s interval "
                        f"({low:.0%}-{high:.0%}) holds {goal:.0%}")
    return "met" if not held else f"undecided: {' and '.join(held)}: a rerun may read either side"


def _misled(row) -> str:
    """Which term misled the model on a case: the one it leaned on (its bound), and which way."""
    way = "under" if row.ratio < 1 else "over"
    return f"{way}-predicted {fmt_ratio(max(row.ratio, 1 / row.ratio))}; {row.bound}-bound by the model"


def crossover_curves(p: pd.DataFrame, column: str) -> tuple[pd.DataFrame, float | None]:
    """Paper-base forward, Transformer against the width-matched RNN: the time ratio RNN / Transformer by n
    (``column``: measured or predicted) and the n where the Transformer overtakes (None: it never changes)."""
    m = p[(p.area == "models") & (p.method == "forward") & (p.preset == "paper-base")]
    if m.empty:
        return pd.DataFrame(), None
    curves = m.groupby(["seq_len", "model"])[column].median().unstack("model")
    if not {"transformer", "rnn-width"} <= set(curves):
        return pd.DataFrame(), None
    curves = curves.dropna(subset=["transformer", "rnn-width"])
    return curves, crossover(curves.index.astype(float), curves["transformer"], curves["rnn-width"])


def where_overtakes(cross: float | None, curves: pd.DataFrame) -> str:
    """Where the Transformer overtakes the RNN, or who is faster over the whole range when it never does."""
    if cross:
        return f"at n ≈ {cross:.0f}"
    faster = "the RNN" if (curves["rnn-width"] < curves["transformer"]).all() else "the Transformer"
    return f"nowhere in n = {int(min(curves.index))}..{int(max(curves.index))} ({faster} faster throughout)"


def heads_ratio(p: pd.DataFrame, column: str) -> tuple[pd.Series, int]:
    """Time of the most heads measured over 1 head at equal FLOPs, per strategy (multihead forward, out_proj
    True), and that head count (an empty series without both)."""
    m = p[(p.area == "multihead") & (p.method == "forward") & (p.out_proj.astype(str) == "True")]
    if m.empty:
        return pd.Series(dtype=float), 0
    by = m.groupby(["strategy", "heads"])[column].median().unstack("heads")
    if 1 not in by or by.columns.max() <= 1:
        return pd.Series(dtype=float), 0
    return (by[by.columns.max()] / by[1]).dropna(), int(by.columns.max())


def peak_over_constants(constants: pd.DataFrame) -> pd.Series:
    """From the constants table (what by device and threads): the run's calibrated GEMM peak over the best GEMM
    rate of the constants that price its cases, where both were measured. Cached constants describe the machine
    on the day they were measured: below 1, it ran its GEMMs slower in this run, and compute-bound predictions
    are short by that much."""
    rows = ("calibrated GEMM peak flops per s", "gemm kernel best flops per s")
    if not set(rows) <= set(constants.index):
        return pd.Series(dtype=float)
    return (constants.loc[rows[0]] / constants.loc[rows[1]]).dropna()


def _at(column: str) -> str:
    """A constants table column ("cpu 2", "cuda ") as words: "cpu at 2 threads", "cuda"."""
    device, _, threads = column.partition(" ")
    return f"{device} at {int(float(threads))} threads" if threads.strip() else device


def analyse(t: pd.DataFrame) -> Analysis:
    """Predicted against measured for every timed case of the run, per area; C1 and heads predicted."""
    a = Analysis("prediction", "Predicted from the machine's constants, then measured", "model", "",
                 units={"errors": "|predicted / measured - 1| by area (median, 90th percentile) and the median "
                                  "predicted / measured", "worst": "seconds per call",
                        "crossover": "RNN time / Transformer time (above 1: the Transformer is faster)",
                        "heads": "time of the most heads measured / 1 head at equal FLOPs",
                        "constants": "the machine's constants by device and threads (micro-benchmarks: FLOP/s, "
                                     "bytes/s, seconds per dispatch) beside the calibrated GEMM peak"})
    constants = t[t.area == "constants"]
    if not constants.empty:  # the machine's constants the predictions rest on, next to its GEMM peaks
        c = constants.assign(what=constants.method + " " + constants.metric.str.replace("_", " "),
                             at=constants.device + " " + constants.threads.astype(str).str.replace("<NA>", ""))
        peaks = t[t.metric == "gemm_peak_flops_per_s"]
        peaks = peaks.assign(what="calibrated GEMM peak flops per s",
                             at=peaks.device + " " + peaks.threads.astype(str).str.replace("<NA>", ""))
        a.tables["constants"] = pd.concat([c, peaks]).pivot_table(index="what", columns="at", values="value",
                                                                  aggfunc="max")
    p = pairs(t)
    if p.empty:
        return a.without("no predictions", "No predictions: the run has no measured constants or no recorded "
                                           "operators (runs made before the performance model).")
    errors = _errors(p)
    a.tables["errors"] = errors
    median, p90 = errors.loc[("all", "all", ""), "median_error"], errors.loc[("all", "all", ""), "p90_error"]
    a.numbers.update(median_error=median, p90_error=p90, cases=len(p))
    drawn = error_draws(p)
    if drawn is not None:
        draws, clusters = drawn
        for i, key in enumerate(("median_error", "p90_error")):
            a.interval(key, *rerun.from_draws(a.numbers[key], draws[:, i], clusters))
    worst = p.assign(off=np.abs(np.log(p.ratio))).nlargest(WORST, "off")
    a.tables["worst"] = pd.DataFrame({"case": [_label(r) for _, r in worst.iterrows()],
                                      "measured": worst.measured.values, "predicted": worst.predicted.values,
                                      "what misled it": [_misled(r) for _, r in worst.iterrows()]})
    scatter = pd.DataFrame({"x": p.measured, "y": p.predicted,
                            "group": p.area + " " + p.method + (" " + p.device if p.device.nunique() > 1 else "")})
    a.plot("predicted_vs_measured", table=scatter, kind="scatter", ideal="identity",
           xlabel="measured time per call (s)", ylabel="predicted time per call (s)",
           title="Every timed case: predicted from the constants against measured")
    areas = errors.drop(index=("all", "all", ""))
    a.verdict = (f"Over {len(p)} timed cases the model's median error is {median:.0%} and its 90th percentile "
                 f"{p90:.0%} (the goal: {TARGET_MEDIAN:.0%} and {TARGET_P90:.0%}; {against_goal(a)}). By area: "
                 + "; ".join(f"{area} {method} on {device} {r.median_error:.0%} / {r.p90_error:.0%} (predicted / "
                             f"measured {r.median_ratio:.2f})" for (device, area, method), r in areas.iterrows())
                 + ". "
                 + "Worst: " + "; ".join(f"{c} ({w})" for c, w in zip(
                     a.tables["worst"]["case"], a.tables["worst"]["what misled it"], strict=True)) + ".")
    drift = peak_over_constants(a.tables["constants"]) if "constants" in a.tables else pd.Series(dtype=float)
    speeds = p.speed.dropna() if "speed" in p else pd.Series(dtype=float)
    if not drift.empty:
        a.verdict += (" This run's calibrated GEMM peak over its constants' best GEMM rate: "
                      + ", ".join(f"{_at(at)} {r:.2f}×" for at, r in drift.items())
                      + " (below 1: the machine ran slower than when the constants were measured"
                      + ("; each prediction is set at its case's speed, below)." if not speeds.empty else
                         ", and compute-bound predictions are short by that much)."))
    if not speeds.empty:
        a.numbers["median_speed"] = float(speeds.median())
        a.verdict += (f" Each prediction is at its case's speed ({len(speeds)} of {len(p)} cases): the control GEMM "
                      "timed around the case over the one timed through the constants' calibration, median "
                      f"{speeds.median():.2f}× ({speeds.min():.2f}-{speeds.max():.2f}×; below 1, the host ran "
                      "slower than when the constants were measured, and the prediction takes that much longer).")
    if unpriced := _unpriced(t):
        a.verdict += (" Not predicted: " + ", ".join(f"{n} timed case{'s' * (n > 1)} at {k:g} thread{'s' * (k != 1)}"
                                                        for k, n in unpriced.items())
                      + " (the run measured constants at its cases' thread count only: --recalibrate measures the "
                        "strong-scaling cases' other counts too).")
    first = p[p.device == sorted(set(p.device), key=lambda d: d != "cpu")[0]]  # the CPU where there is one
    measured, cross_m = crossover_curves(first, "measured")
    predicted, cross_p = crossover_curves(first, "predicted")
    if not measured.empty:
        a.tables["crossover"] = pd.DataFrame({"measured": measured["rnn-width"] / measured["transformer"],
                                              "predicted": predicted["rnn-width"] / predicted["transformer"]})
        steps = sorted(measured.index)
        within = (cross_m is None) == (cross_p is None) and (
            cross_m is None or abs(np.searchsorted(steps, cross_m) - np.searchsorted(steps, cross_p)) <= 1)
        a.numbers.update(crossover_measured=cross_m or float("nan"), crossover_predicted=cross_p or float("nan"))
        said_p, said_m = where_overtakes(cross_p, predicted), where_overtakes(cross_m, measured)
        batch = "/".join(str(b) for b in sorted(set(first[first.area == "models"].batch) - {""}))
        a.verdict += (f" C1 at paper-base (forward, batch {batch}, against the width-matched RNN), where the "
                      f"Transformer overtakes: {said_p} predicted, {said_m} measured ("
                      + ("within one grid step" if within else "more than one grid step apart: the model misses "
                         "what decides it, see the worst cases") + ").")
    (heads_m, h), (heads_p, _) = heads_ratio(first, "measured"), heads_ratio(first, "predicted")
    if not heads_m.empty:
        a.tables["heads"] = pd.DataFrame({"measured": heads_m, "predicted": heads_p})
        shape = ", ".join(f"{k} {v}" for k, v in cases.MULTIHEAD_SHAPE.items())
        a.verdict += f" {h} heads against 1 at equal FLOPs ({shape}, with W_O): " + "; ".join(
            f"{s} {fmt_ratio(heads_p[s])} predicted, {fmt_ratio(heads_m[s])} measured" for s in heads_m.index) + "."
    a.quoted = ["median_error", "p90_error", "cases"]
    a.answer = (f"Predicted from micro-benchmarked constants alone: median error {median:.0%}"
                f"{span(a, 'median_error')}, 90th percentile {p90:.0%}{span(a, 'p90_error')} over {len(p)} cases"
                + (f"; C1 crossover {'none' if not cross_p else f'n ≈ {cross_p:.0f}'} predicted, "
                   f"{'none' if not cross_m else f'n ≈ {cross_m:.0f}'} measured." if not measured.empty else "."))
    median_case = fmt_time(p.measured.median())
    a.conditions = (f"every timed case of the run at its own sizes (named in the tables), "
                    f"{conditions(t[t.metric == 'predicted_time'], n=False)}; median case {median_case}")
    return a
