"""Every published figure in its range: one checker, run by the report before it writes anything.

A figure outside the range its meaning allows is not published: its value is withheld (NaN) and the page
says which figure, its value and why, instead of a fraction of a peak above 1 or a speed-up of 0.01x on the
first screen. The rules, by what a figure is (its key in an analysis's ``numbers``, or its metric in the
tidy table, which the CSV is):

    fraction of a peak    0 < v <= PEAK_TOLERANCE   best_fraction_*, fraction_of_peak
    share                 0 <= v <= 1               *share*
    parallel efficiency   0 < v <= PEAK_TOLERANCE   efficiency_*
    thread speed-up       1/p <= v <= PEAK_TOLERANCE * p on p threads (below 1/p the p-thread run lost
                          more than sharing p cores can take: other processes had them)
    correlation           -1 <= v <= 1              corr_*
    count, FLOPs, bytes, an error, a prediction
                          >= 0 and finite
    speed-up, ratio, peak, rate, time, crossover
                          > 0 and finite
    anything else         finite (NaN: not measured, never published as a number)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pandas as pd

from benchmarks.core.hardware.machine import PEAK_TOLERANCE

from .analyses.base import Analysis


def _between(low: float, high: float, low_open: bool = False) -> Callable[[float, str], str | None]:
    def check(v: float, key: str) -> str | None:
        if (v <= low if low_open else v < low) or v > high:
            return f"outside {'(' if low_open else '['}{low:g}, {high:g}]"
        return None
    return check


def _positive(v: float, key: str) -> str | None:
    return None if v > 0 else "not above 0"


def _not_negative(v: float, key: str) -> str | None:
    return None if v >= 0 else "below 0"


def _thread_speedup(v: float, key: str) -> str | None:
    p = int(re.search(r"_p(\d+)$", key).group(1))
    if v < 1 / p:
        return (f"below 1/{p}: the {p}-thread run was slowed more than sharing {p} cores explains (other processes "
                "had them)")
    if v > PEAK_TOLERANCE * p:
        return f"above {PEAK_TOLERANCE:g} x {p} threads: faster than {p} threads can be (the 1-thread run was slowed)"
    return None


#: (pattern of a figure's key or metric, its check, what it is); the first rule that matches applies
RULES: list[tuple[str, Callable[[float, str], str | None], str]] = [
    (r"(^|_)fraction(_|$)", _between(0, PEAK_TOLERANCE, low_open=True), "a fraction of a peak"),
    (r"share", _between(0, 1), "a share"),
    (r"^efficiency_", _between(0, PEAK_TOLERANCE, low_open=True), "a parallel efficiency"),
    (r"^speedup_.*_p\d+$", _thread_speedup, "a speed-up over threads"),
    (r"^corr_", _between(-1, 1), "a correlation"),
    (r"error|^cases$|^profiles$|within|match|as_claimed|bytes|flops$|^predicted_", _not_negative,
     "a count or an error"),
    (r"speedup|ratio|_over_|advantage|peak|per_s|ridge|crossover|saturates|^c1_|^heads_|^time|entropy", _positive,
     "a speed-up, ratio, peak, rate or time"),
]


def why_out_of_range(key: str, value) -> str | None:
    """Why figure ``key`` = ``value`` cannot be published, or None (NaN is not published and passes)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if not math.isfinite(value):
        return "not finite"
    for pattern, check, what in RULES:
        if re.search(pattern, key):
            why = check(float(value), key)
            return f"{what}, {why}" if why else None
    return None


def check(a: Analysis) -> Analysis:
    """``a`` with each figure outside its range withheld: its number NaN, the answer and verdict replaced by
    what was withheld and why (they quote the figure), the reason in ``missing``. Tables stay (the data)."""
    bad = {key: (value, why) for key, value in a.numbers.items() if (why := why_out_of_range(key, value))}
    if not bad:
        return a
    said = "; ".join(f"{key} = {value:.3g} ({why})" for key, (value, why) in bad.items())
    for key in bad:
        a.numbers[key] = float("nan")
    a.missing.append(f"withheld, out of range: {said}")
    a.answer = f"Withheld: {len(bad)} figure{'s' * (len(bad) != 1)} out of range ({said}); see the section."
    a.verdict = (f"Withheld: the figures {', '.join(bad)} fall outside the range their meaning allows ({said}), so "
                 "this section publishes none of its figures; its tables show the data they came from.")
    return a


def check_table(table: pd.DataFrame) -> pd.DataFrame:
    """The tidy table with each row whose value is out of range for its metric withheld: value NaN, the
    reason said in ``reason`` (status unchanged, so the case still counts as measured)."""
    out = table.copy()
    whys = [why_out_of_range(m, v) if s == "ok" else None
            for m, v, s in zip(out.metric, out.value, out.status, strict=True)]
    hit = pd.Series([w is not None for w in whys], index=out.index)
    if hit.any():
        said = [w for w in whys if w is not None]
        out.loc[hit, "reason"] = [f"withheld: {m} = {v:.4g} is {w}" + (f"; {r}" if isinstance(r, str) else "")
                                  for m, v, w, r in zip(out.metric[hit], out.value[hit], said, out.reason[hit],
                                                        strict=True)]
        out.loc[hit, "value"] = float("nan")
    return out
