"""How sure a ratio is: the range between two times' quartiles, and saying so when no spread was measured."""

from __future__ import annotations

import pandas as pd

from benchmarks.core.timing import rerun
from benchmarks.core.timing.measure import MIN_SAMPLES

from .base import fmt_ratio


def ratio_interval(first: tuple[float, float, float], second: tuple[float, float, float]) -> tuple[float, float]:
    """The interval of time(second) / time(first) from each time's (value, low, high): where a rerun's ratio
    lands (``rerun.ratio``: the two intervals' half-widths in quadrature); NaN where either has none."""
    if any(pd.isna(x) for x in (*first, *second)):
        return float("nan"), float("nan")
    return rerun.ratio(first, second)


def ratio_spread(rows: pd.DataFrame, first: str, second: str) -> dict:
    """How sure the speed-up time(second) / time(first) is, from the two models' time rows (column ``model``):
    ``samples``, the fewest values either time is over (absent when the results do not say), and when that
    is at least MIN_SAMPLES its interval (``speedup_low``, ``speedup_high``) and what it is over
    (``spread_over``): with both times from MIN_SAMPLES or more processes, where a rerun's ratio lands
    (``ratio_interval``, "processes"); otherwise the range between the two times' quartiles,
    over rounds of one process ("rounds") or one round's blocks ("blocks")."""
    a, b = (rows[rows.model == m] for m in (first, second))
    samples = pd.concat([a.samples, b.samples])
    if a.empty or b.empty or samples.isna().any():
        return {}
    out = {"samples": int(samples.min())}
    if out["samples"] < MIN_SAMPLES:
        return out
    processes = pd.concat([a.processes, b.processes]) if "processes" in rows else pd.Series(dtype=float)
    if len(processes) == len(a) + len(b) and processes.notna().all() and processes.min() >= MIN_SAMPLES:
        low, high = ratio_interval((a.value.median(), a.low.median(), a.high.median()),
                                   (b.value.median(), b.low.median(), b.high.median()))
        return {**out, "speedup_low": low, "speedup_high": high, "spread_over": "processes",
                "processes": int(processes.min())}
    rounds = pd.concat([a.rounds, b.rounds]).dropna()
    out.update(speedup_low=b.q25.median() / a.q75.median(), speedup_high=b.q75.median() / a.q25.median(),
               spread_over="rounds" if not rounds.empty and rounds.min() >= MIN_SAMPLES else "blocks")
    return out


def spread_phrase(spread: dict, ratio: float) -> str:
    """The clause that says how sure ``ratio`` is (``ratio_spread``): its range between the two times'
    quartiles, said to be over rounds spread over the run or over one round's blocks, seconds apart (which
    on a shared machine understate how far two runs differ); or, when either time is over fewer than
    MIN_SAMPLES values (a slow call timed once: an IQR of 0 that measures nothing), that no spread was
    measured."""
    least = spread.get("samples")
    if least is None:
        return (f"; the {fmt_ratio(ratio)} has no known spread (these results do not say how many values each time "
                "is over)")
    least = int(least)
    if least < MIN_SAMPLES:
        return (f"; the {fmt_ratio(ratio)} has no measured spread, a time in it resting on {least} timed value"
                f"{'s' if least > 1 else ''} (a shared machine's times move from run to run: --rounds R times "
                "each case R times over the run and gives a range)")
    span = f"{fmt_ratio(spread['speedup_low'])}-{fmt_ratio(spread['speedup_high'])}"
    if spread["spread_over"] == "processes":
        return (f"; from the {spread['processes']} or more fresh processes each time was measured in, a rerun's "
                f"{fmt_ratio(ratio)} lands in {span} ({rerun.CONFIDENCE:.0%})")
    if spread["spread_over"] == "rounds":
        return (f"; between the two times' quartiles over {least} or more rounds spread over the run, the "
                f"{fmt_ratio(ratio)} spans {span}")
    return (f"; between the two times' quartiles ({least} or more timed blocks each, seconds apart) the "
            f"{fmt_ratio(ratio)} spans {span}, and times measured minutes apart on a shared machine can differ more "
            "(--rounds R times each case R times over the run)")


def unreplicated_note(times: pd.DataFrame, where: str) -> str:
    """A sentence when times a verdict rests on (time rows) are over fewer than MIN_SAMPLES values each
    (a slow call timed once), so that its ratios have no measured spread; else nothing."""
    thin = times[(times.samples < MIN_SAMPLES).fillna(False)]
    if thin.empty:
        return ""
    return (f"{len(thin)} of the {len(times)} times {where} rest on fewer than {MIN_SAMPLES} timed values (as few "
            f"as {int(thin.samples.min())}), so these ratios have no measured spread (--rounds R times each case R "
            "times over the run).")


