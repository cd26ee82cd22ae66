"""How much of the difference between two machines their constants explain: the first run's figures recomputed
with each case's times scaled by what the performance model predicts for the second machine over the first
(``perfmodel.predict`` over the operators the case executed, with each machine's measured constants at the
case's device, dtype and threads), beside the change measured.

A figure of times alone (a speed-up, a time ratio) moves as its times do; a fraction of the GEMM peak is over
the second machine's measured peak; a figure from paired ratios, profiles or the performance model's own
check has no prediction: those are not recomputed from the grid's times.
"""

from __future__ import annotations

import math
import os

import pandas as pd

from benchmarks.core.hardware import machine, perfmodel
from benchmarks.core.records import read_json

from . import tidy
from .peaks import peak_key, peaks_of

#: time metrics that scale with the predicted factor; rates (per time) scale with its inverse
SCALED_TIMES = ("time", "time_normalised", "time_best_round")
SCALED_COLUMNS = ("value", "q25", "q75", "iqr", "low", "high", "lowest", "highest")


def factors(first: str, other: str) -> dict[tuple, float]:
    """Per case and method of ``first`` (area, method and its params as sorted items): the predicted time on
    ``other``'s machine over the predicted time on ``first``'s, for each record with operators and constants
    at its key on both machines."""
    mine, theirs = (tidy.constants_of(read_json(os.path.join(f, "machine.json"))) for f in (first, other))
    out = {}
    for rec in tidy.counted(first)[1]:
        key = peak_key(rec)
        if rec.get("status") != "ok" or not rec.get("ops") or key not in mine or key not in theirs:
            continue
        ops = [perfmodel.Priced(**op) for op in rec["ops"]]
        here, there = (perfmodel.predict(ops, c, rec.get("dispatches")).time_s for c in (mine[key], theirs[key]))
        if here > 0 and math.isfinite(there):
            out[rec["area"], rec["method"], tuple(sorted(rec["params"].items()))] = there / here
    return out


def predicted_table(first: str, other: str) -> pd.DataFrame | None:
    """``first``'s tidy table with each case's times (and rates, inverted) scaled by ``factors``, its cases
    without a factor left out; None when either folder has no constants."""
    scale = factors(first, other)
    if not scale:
        return None
    t = tidy.load([first])
    peaks = peaks_of(read_json(os.path.join(other, "machine.json")))
    gemm = t.metric == "gemm_peak_flops_per_s"
    for i in t.index[gemm]:  # fractions of peak over the other machine's measured peak
        r = t.loc[i]
        key = machine.peak_key(r.device, r.dtype, None if pd.isna(r.threads) else int(r.threads))
        t.loc[i, "value"] = peaks.get(key, math.nan)
    keep = gemm & t.value.notna()  # the model's own rows (its constants, its predictions) stay out: no circle
    for (area, method, params), f in scale.items():
        mask = (t.area == area) & (t.method == method)
        for axis, value in params:
            mask &= t[axis] == value
        keep |= mask
        for metric_set, by in ((SCALED_TIMES, f), (tidy.PER_TIME, 1 / f)):
            rows = mask & t.metric.isin(metric_set)
            for column in SCALED_COLUMNS:
                t.loc[rows, column] = t.loc[rows, column] * by
    return t[keep]
