"""A run on one screen (``Runner.summary``): what was measured, skipped (why), out of memory, failed (why),
noisy, unreplicated, set aside, and where the results are."""

from __future__ import annotations

from collections import Counter

from ..records import STATUSES, case_key
from ..timing import measure

#: a timed case whose spread (IQR over median) passes this is flagged noisy in the summary and on the page
NOISY = 0.10


def _why(records: list[dict], limit: int = 3) -> str:
    reasons = Counter(r["reason"] for r in records)
    told = [f"{n} × {reason}" for reason, n in reasons.most_common(limit)]
    return "; ".join(told) + (f"; {len(reasons) - limit} other reasons" if len(reasons) > limit else "")


def _worst(items: list[tuple], shown, limit: int = 3) -> str:
    """': key (value), ... and N more' for the first ``limit`` of (value, key) pairs, worst first; '' if none."""
    if not items:
        return ""
    listed = ", ".join(f"{key} ({shown(value)})" for value, key in items[:limit])
    return f": {listed}" + (f", and {len(items) - limit} more" if len(items) > limit else "")


def summary(out: str, records: list[dict], counts: dict[str, int], set_aside: list[str]) -> str:
    """See Runner.summary; ``records``: those this run wrote."""
    by = {s: [r for r in records if r["status"] == s] for s in STATUSES}
    noisy = sorted((r["time_iqr_s"] / r["time_median_s"], case_key(r["area"], r["method"], r["params"]))
                   for r in by["ok"] if r.get("time_median_s") and r.get("time_iqr_s") is not None
                   and r["time_iqr_s"] / r["time_median_s"] > NOISY)[::-1]
    lines = [f"Run summary ({out})",
             f"  measured       {counts.get('ok', 0)}",
             f"  resumed        {counts.get('resumed', 0)} cases already recorded at this commit"]
    for status, label in (("skipped", "skipped"), ("oom", "out of memory"), ("failed", "failed")):
        lines.append(f"  {label:14s} {counts.get(status, 0)}" + (f": {_why(by[status])}" if by[status] else ""))
    lines.append(f"  noisy          {len(noisy)} with IQR/median > {NOISY:.0%}"
                 + _worst(noisy, lambda rel: f"{rel:.0%}"))
    thin = sorted((r["time_median_s"], case_key(r["area"], r["method"], r["params"])) for r in by["ok"]
                  if r.get("time_median_s") and r.get("samples") is not None
                  and r["samples"] < measure.MIN_SAMPLES)[::-1]
    lines.append(f"  unreplicated   {len(thin)} timed over fewer than {measure.MIN_SAMPLES} values, "
                 "so no spread measured"
                 + (" (--rounds R times each R times, spread over the run)" if thin else "")
                 + _worst(thin, lambda t: f"{t:.2g} s"))
    lines.append(f"  set aside      {len(set_aside)}"
                 + (f" unreadable records: {', '.join(set_aside)}" if set_aside else ""))
    lines.append(f"  results in     {out} (machine.json, cases/)")
    return "\n".join(lines)
