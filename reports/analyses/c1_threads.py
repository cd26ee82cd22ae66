"""C1 on CPU threads: strong scaling, speed-up T(1)/T(p) and parallel efficiency, of fixed workloads. Where the
run timed a workload at 1 and p threads in the same processes (the runner's rounds), its speed-up is the one taken
process by process (``reports.spans_over_processes.speedups``), not the ratio of two medians whose processes and
moments differ."""

from __future__ import annotations

import pandas as pd

from benchmarks import cases
from benchmarks.core.timing import rerun

from ..spans_over_processes import SHORT, SPEEDUP
from .base import Analysis, conditions, ok_rows, time_curves
from .spread import ratio_interval


def analyse(t: pd.DataFrame) -> Analysis:
    """C1: strong scaling on CPU threads: speed-up T(1)/T(p) and parallel efficiency speed-up/p."""
    rows = ok_rows(t, "threads", "time")
    a = Analysis("c1_threads", "Strong scaling over CPU threads", "C1", "")
    if rows.empty or rows.threads.nunique() < 2:
        return a.without("fewer than two thread counts",
                         "Thread scaling needs at least two thread counts: run the threads area on a multi-core CPU.")
    times, interval = time_curves(rows, "threads", "workload")
    one = times.loc[times.index.min()]
    speedup = one / times
    paired = ok_rows(t, "threads", SPEEDUP).set_index(["threads", "workload"])
    for (p, w), row in paired.iterrows():
        if p in speedup.index and w in speedup.columns:
            speedup.loc[p, w] = row.value
    efficiency = speedup.div(speedup.index.to_series(), axis=0)
    a.tables.update(time=times, speedup=speedup, efficiency=efficiency)
    a.plot("speedup", xlabel="CPU threads", ylabel="speed-up over 1 thread (×)", title="Strong scaling: speedup",
           ideal="identity")
    a.plot("efficiency", xlabel="CPU threads", ylabel="parallel efficiency", title="Strong scaling: efficiency",
           ideal="one")
    p = int(times.index.max())
    for w in times:
        a.numbers[f"speedup_{w}_p{p}"] = speedup.loc[p, w]
        a.numbers[f"efficiency_{w}_p{p}"] = efficiency.loc[p, w]
        if (p, w) in paired.index:  # where a rerun's speed-up lands, from the processes that timed both
            a.interval(f"speedup_{w}_p{p}", paired.loc[(p, w), "low"], paired.loc[(p, w), "high"])
        elif interval:  # where a rerun's speed-up lands: speed-up = time on 1 thread / time on p
            low, high = interval["low"], interval["high"]
            one_thread = times.index.min()
            span = ratio_interval((times.loc[p, w], low.loc[p, w], high.loc[p, w]),
                                  (times.loc[one_thread, w], low.loc[one_thread, w], high.loc[one_thread, w]))
            if span[0] == span[0]:
                a.interval(f"speedup_{w}_p{p}", *span)
    a.verdict = (f"{_workloads(times.columns)}; on {p} threads, speed-ups over 1 thread: "
                 + ", ".join(f"{w} {speedup.loc[p, w]:.2f}× ({efficiency.loc[p, w]:.0%} efficiency)" for w in times)
                 + f". {ranked(a, p, list(times))}.")
    a.conditions = f"workloads as named in the verdict, {conditions(rows, n=False)}"
    a.quoted = [f"speedup_{w}_p{p}" for w in times]
    short = {w: _short(paired.loc[(p, w)]) for w in times if (p, w) in paired.index}
    a.answer = (f"Speed-up on {p} threads over 1: " + ", ".join(
        f"{w} {speedup.loc[p, w]:.2f}×" + _within(lo, hi, short.get(w))
        for w in times for lo, hi in [a.intervals.get(f"speedup_{w}_p{p}", (None, None))]) + ".")
    if any(short.values()):
        a.verdict += (f" A process had the cores short where the control GEMM timed around a case ran below "
                      f"{SHORT:.0%} of this run's usual rate at its thread count: the host ran something else on "
                      "them, which a virtual machine's own CPU counts do not show, and a speed-up over threads feels "
                      "it on one side only; the speed-ups of such processes are not a quiet machine's.")
    return a


def ranked(a: Analysis, p: int, workloads: list[str]) -> str:
    """Which workload scales best and which worst on ``p`` threads: with those whose speed-up is not apart from
    theirs at their intervals (``rerun.apart``; where a figure has none, its value decides), alike."""
    fig = {w: (a.numbers[f"speedup_{w}_p{p}"], *a.intervals.get(f"speedup_{w}_p{p}", (None, None))) for w in workloads}
    order = sorted(workloads, key=lambda w: -fig[w][0])
    best = [w for w in order if w == order[0] or rerun.apart(fig[order[0]], fig[w]) is False]
    worst = [w for w in order[::-1] if w == order[-1] or rerun.apart(fig[order[-1]], fig[w]) is False]
    if set(best) & set(worst):
        return "No workload scales apart from the others within their intervals"
    alike = " (alike within their intervals)"
    return (f"{best[0]} scales best" if len(best) == 1 else f"{' and '.join(best)} scale best{alike}") + ", " + (
        f"{worst[0]} worst" if len(worst) == 1 else f"{' and '.join(worst)} worst{alike}")


def _short(row) -> str | None:
    """'cores short in 2 of 3 processes' where a speed-up's processes had them short (``short_processes``), else
    None."""
    n = row.get("short_processes")
    if pd.isna(n) or not n:
        return None
    return f"cores short in {int(n)} of {int(row.processes)} processes"


def _within(low, high, short: str | None) -> str:
    """' (1.02-1.86; cores short in 3 of 3 processes)', or as much of it as there is."""
    parts = ([f"{low:.2f}-{high:.2f}"] if (low, high) != (None, None) else []) + ([short] if short else [])
    return f" ({'; '.join(parts)})" if parts else ""


def _workloads(names) -> str:
    """What each thread-scaling workload is (a fixed case of another area)."""
    parts = []
    for w in names:
        try:
            _, p = cases.workload(w)
        except ValueError:  # a workload this suite no longer has
            p = {}
        shown = {k: v for k, v in p.items() if k not in ("device", "dtype", "causal", "out_proj")}
        parts.append(f"{w} ({', '.join(f'{k} {v}' for k, v in shown.items())})")
    return "Workloads, float32 on the CPU: " + "; ".join(parts)

