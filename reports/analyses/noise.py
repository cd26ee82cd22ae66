"""Noise you can trust: do two runs of the same code on the same machine agree, raw and normalised?

Each CPU time in a runner folder is stored next to a control GEMM measured just before and after it
(``benchmarks.core.hardware.control``); ``time_normalised`` is the time scaled by that control's rate
over the run's typical rate (``reports.tidy``). A run timed in interleaved rounds (``--rounds``) also
has ``time_best_round``, its least disturbed round. ``agreement`` sets two runs side by side case by
case and says how far apart they are, both ways, so that a user sees whether the normalisation helps
on their machine instead of taking it on trust.
"""

from __future__ import annotations

import itertools

import pandas as pd

from benchmarks.core.hardware.machine import BUSY_SHARE
from benchmarks.core.running.runner import NOISY
from benchmarks.core.timing.measure import MIN_SAMPLES

from .. import tidy
from .base import case_columns
from .runs import run_key

#: the estimates of a case's time whose agreement is told: the median (raw), normalised by the control, and
#: with several rounds (``--rounds``) the best round's median
AGREEMENT_METRICS = {"time": "raw", "time_normalised": "normalised by the control GEMM",
                     "time_best_round": "best round"}
#: cases faster than this are left out: their times are dominated by timer and launch noise
MIN_TIME_S = 1e-3


def _relative_iqr(t: pd.DataFrame) -> pd.DataFrame:
    """The timed cases that ran, each with its IQR over its median (``relative_iqr``)."""
    rows = t[(t.metric == "time") & (t.status == "ok")].dropna(subset=["value", "iqr"])
    return rows.assign(relative_iqr=rows.iqr / rows.value)


def summary(t: pd.DataFrame) -> pd.DataFrame:
    """IQR over median of every timed case, summarised per area and method."""
    return _relative_iqr(t).groupby(["area", "method"]).relative_iqr.describe(percentiles=[0.5, 0.9])[
        ["count", "50%", "90%", "max"]].rename(columns={"50%": "median", "90%": "p90"})


def noisy_cases(t: pd.DataFrame) -> pd.DataFrame:
    """Every timed case whose IQR over median passes the runner's NOISY threshold, noisiest first."""
    rows = _relative_iqr(t)
    rows = rows[rows.relative_iqr > NOISY].sort_values("relative_iqr", ascending=False)
    return case_columns(rows, "value", "relative_iqr").rename(columns={"value": "median s"})


def unreplicated_cases(t: pd.DataFrame) -> pd.DataFrame:
    """Every timed case whose quartiles are over fewer than MIN_SAMPLES values (one block of a slow call, or
    two rounds): an IQR of 0 there means no spread was measured, not a steady time. Slowest first."""
    rows = t[(t.metric == "time") & (t.status == "ok") & (t.samples < MIN_SAMPLES).fillna(False)]
    return case_columns(rows.sort_values("value", ascending=False), "value", "samples").rename(
        columns={"value": "median s"})


def two_mode_cases(t: pd.DataFrame) -> pd.DataFrame:
    """Every timed case whose processes ran it at two levels, further apart than their own spread
    (``benchmarks.core.timing.measure.modes_of``): each level with how many processes ran at it, and the
    lowest and highest process. Widest first."""
    if "modes" not in t:
        return pd.DataFrame()
    rows = t[(t.metric == "time") & (t.status == "ok") & t.modes.notna()]
    rows = rows.assign(spread=rows.highest / rows.lowest).sort_values("spread", ascending=False)
    return case_columns(rows, "value", "modes", "lowest", "highest").rename(
        columns={"value": "median s", "lowest": "lowest process s", "highest": "highest process s"})


def busy_cases(t: pd.DataFrame) -> pd.DataFrame:
    """Every timed case during which other processes used more than BUSY_SHARE of the cores (the runner's
    ``others_cpu_share``), busiest first, with its time: slower and noisier than on a quiet machine."""
    busy = t[(t.metric == "others_cpu_share") & (t.status == "ok") & (t.value > BUSY_SHARE)]
    if busy.empty:
        return pd.DataFrame()
    keys = ["run", "area", "method", *tidy.PARAMS]
    times = t[(t.metric == "time") & (t.status == "ok")][keys + ["value"]].rename(columns={"value": "median s"})
    rows = busy.rename(columns={"value": "others_cpu_share"}).merge(times, on=keys, how="left")
    return case_columns(rows.sort_values("others_cpu_share", ascending=False), "others_cpu_share", "median s")


def run_warnings(runs: pd.DataFrame) -> list[str]:
    """What a reader must know before trusting a run (``runs.table``): it was cut short before all its
    rounds, or timed while other processes used the cores."""
    out = []
    for run, r in runs.iterrows():
        if r.get("incomplete", 0) > 0:
            out.append(f"Run {run}: {r.incomplete} timed cases have fewer rounds than the {r.rounds_planned} "
                       "planned: the run was cut short. Its times are over fewer rounds; run the same command "
                       "again to finish it.")
        if pd.notna(r.get("busy_cases")) and r.busy_cases > 0:
            out.append(f"Run {run} was measured on a busy machine: other processes used more than {BUSY_SHARE:.0%} "
                       f"of the cores while {r.busy_cases} of its CPU cases were timed (their share: {r.others_cpu})."
                       " Those times are slower and noisier; each is listed under Noise.")
    return out


def peak_warnings(t: pd.DataFrame) -> list[str]:
    """Each GEMM peak the report raised above its calibration (``reports.tidy``: a case passed it), by what
    and by which case: every fraction of that peak is over the raised value."""
    raised = t[(t.metric == "gemm_peak_flops_per_s") & t.reason.notna()]
    return [f"Run {r.run}: the GEMM peak of {r.device}, {r.dtype}"
            + (f", {int(r.threads)} threads" if pd.notna(r.threads) else "")
            + f" is {r.value / 1e9:.1f} GFLOP/s: {r.reason}. Fractions of that peak are over the raised value."
            for r in raised.itertuples()]


def agreement(t: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    """Per metric (AGREEMENT_METRICS that both runs have): how many common timed cases, and the median and worst
    |second / first - 1| over them, for runs ``first`` and ``second`` (their ``run`` labels)."""
    keys = run_key(t)
    columns = ["area", "method", *tidy.PARAMS]
    rows = []
    for metric in AGREEMENT_METRICS:
        ok = t[(t.metric == metric) & (t.status == "ok")]

        def one(run, ok=ok):
            r = ok[keys[ok.index] == run]
            case = r[columns].astype(object).where(r[columns].notna(), "").astype(str).agg("|".join, axis=1)
            return pd.Series(r.value.to_numpy(), index=case.to_numpy())[lambda v: ~v.index.duplicated()]

        a, b = one(first), one(second)
        common = a.index.intersection(b.index)
        common = [i for i in common if a[i] >= MIN_TIME_S]
        if not common:
            continue
        gap = (b[common] / a[common] - 1).abs()
        rows.append({"metric": metric, "cases": len(common), "median_gap": float(gap.median()),
                     "worst_gap": float(gap.max()), "within_3pct": int((gap <= 0.03).sum())})
    return pd.DataFrame(rows).set_index("metric") if rows else pd.DataFrame()


def agreements(t: pd.DataFrame) -> list[dict]:
    """For each machine with several runs, each run against the one before it (by date): ``agreement``'s
    rows as plain dicts, with the machine, both runs named and the rounds each was timed in (None: unknown,
    as for asv's results)."""
    keys = run_key(t)
    rounds = t.rounds.groupby(keys).max()
    found = []
    for machine, g in t.groupby("machine"):
        runs = list(g.date.groupby(keys[g.index]).max().sort_values().index)
        for first, second in itertools.pairwise(runs):
            agree = agreement(t, first, second)
            if not agree.empty:
                found.append({"machine": machine, "first": first, "second": second, "min_time_s": MIN_TIME_S,
                              "rounds": [None if pd.isna(rounds.get(r)) else int(rounds[r]) for r in (first, second)],
                              "rows": agree.reset_index().to_dict("records")})
    return found


def rounds_told(found: dict) -> str:
    """' (timed in 5 rounds each)' or ' (timed in 1 and 5 rounds)' for an ``agreements`` entry; '' when unknown."""
    rounds = found.get("rounds") or [None, None]
    if None in rounds:
        return ""
    if rounds[0] == rounds[1]:
        return f" (timed in {rounds[0]} round{'s' if rounds[0] > 1 else ''} each)"
    return f" (timed in {rounds[0]} and {rounds[1]} rounds)"
