"""A run's times at its typical speed: each process's time scaled by the machine's speed when it was timed, read
from the control GEMM timed just before and after it (``benchmarks.core.hardware.control``), over
the run's typical speed (the median control at that thread count). A shared host's speed drifts between the
processes of one run and between runs; what a case achieves against what the machine reaches at that moment
does not, so a normalised time moves less between runs than the raw one (C2's fractions of the GEMM peak are
taken over it)."""

from __future__ import annotations

import pandas as pd

from benchmarks.core.timing import measure

#: neighbouring controls (in time order) whose median stands for the machine's speed at a case timed in one
#: round: a single 10 ms control is itself noisy (18-166 GFLOP/s within one run on a 2-core VM), the drift it
#: is meant to catch is slower than one case
CONTROL_WINDOW = 15
#: a round's time fields, scaled alike (a record's are the same, "time_" before each)
_TIMES = ("median_s", "q25_s", "q75_s")


def records(kept: list[dict]) -> list[tuple[dict, dict]]:
    """(record, its normalised copy) for every timed CPU record with controls. A record timed in several rounds
    (each a process) scales each round by its own control (their geometric mean before and after it) and
    recombines them (``measure.combined``: the median, the interval over processes, two modes where the
    processes ran at two levels); a record of one round scales its time by the median of the CONTROL_WINDOW
    controls nearest in time, its own among them (on this VM, two 5-round runs were 6.8% apart at the median
    with each round's own control, 7.5% with the window)."""
    ok = [r for r in kept if r.get("status") == "ok" and r.get("control_flops_per_s") and r.get("time_median_s")]
    if not ok:
        return []
    rows = [(i, j, r.get("threads"), x["control_flops_per_s"], x.get("started_at") or "", len(_rounds(r)) > 1)
            for i, r in enumerate(ok) for j, x in enumerate(_rounds(r)) if x.get("control_flops_per_s")]
    frame = pd.DataFrame(rows, columns=["record", "round", "threads", "control", "started", "own"]).sort_values(
        "started", kind="stable")
    window = frame.groupby("threads", dropna=False).control.transform(
        lambda c: c.rolling(CONTROL_WINDOW, center=True, min_periods=1).median())
    speed = frame.control.where(frame.own, window)
    frame["factor"] = speed / frame.groupby("threads", dropna=False).control.transform("median")
    out = []
    for i, scaled in frame.groupby("record"):
        rec, factors = ok[i], dict(zip(scaled["round"], scaled.factor, strict=True))
        if len(_rounds(rec)) > 1:
            rounds = [{**x, **{k: x[k] * factors[j] for k in _TIMES}} for j, x in enumerate(rec["rounds"])
                      if j in factors]
            norm = {**rec, **measure.combined(rounds)} if len(rounds) > 1 else None
        else:
            norm = {**rec, **{f"time_{k}": rec[f"time_{k}"] * factors[0] for k in _TIMES}}
            norm["time_iqr_s"] = norm["time_q75_s"] - norm["time_q25_s"]
        if norm is not None:
            out.append((rec, norm))
    return out


def _rounds(rec: dict) -> list[dict]:
    """A record's rounds; one round standing for the record where it kept none (its control and start)."""
    return rec.get("rounds") or [{"control_flops_per_s": rec["control_flops_per_s"],
                                  "started_at": rec.get("started_at")}]
