"""A time measured in several processes (the runner's rounds, each a fresh process): the interval where a
rerun's median lands, the processes' own range, and their two levels when they ran at two; and the thread
speed-ups taken process by process."""

from __future__ import annotations

import math

import numpy as np

from benchmarks.core.timing import measure, rerun


def process_logs(rec: dict) -> np.ndarray:
    """The logs of a record's per-process medians (its rounds, each in a fresh process)."""
    return np.log([r["median_s"] for r in rec.get("rounds") or () if r.get("median_s")])


def process_times(rec: dict) -> tuple[float, ...] | None:
    """A record's median in each of its rounds, in round order (each round a process that timed every case of
    the run: the n-th of two cases' times come from one process), or None where it has fewer than two."""
    times = tuple(r["median_s"] for r in rec.get("rounds") or ())
    return times if len(times) > 1 else None


def priors(kept: list[dict]) -> dict[tuple[str, str], float]:
    """Per (area, device), the variance of one process's log time typical of the area's cases in this run
    (``rerun.typical_variance``), from the records timed in several processes."""
    logs: dict[tuple[str, str], list] = {}
    for rec in kept:
        if rec.get("status") == "ok" and (rec.get("processes") or 0) > 1 and len(rec.get("rounds") or ()) > 1:
            logs.setdefault((rec["area"], rec["params"].get("device")), []).append(process_logs(rec))
    return {key: v for key, x in logs.items() if (v := rerun.typical_variance(x)) is not None}


def spans(rec: dict, prior: float | None = None) -> dict:
    """A time over the processes it was timed in: ``low``, ``high``, the interval where a rerun's median lands
    (``benchmarks.core.timing.rerun``: the processes' spread moderated by ``prior``), ``lowest`` and
    ``highest``, the lowest and highest process's median, how many (``processes``) and, when they ran at two
    levels, ``modes`` ("8.9 ms in 1 process, 51 page faults per call; 16 ms in 2 processes, 8160 page faults
    per call") and, when the slower level faults in pages each call that the faster does not (two memory states,
    ``measure.memory_states``), the faster level's time, ``fast`` (``fast_low``, ``fast_high``: its interval);
    nothing for a time from one process."""
    if (rec.get("processes") or 0) < 2 or rec.get("time_low_s") is None:
        return {}
    logs = process_logs(rec)
    width = rerun.half_width(logs, prior) if len(logs) > 1 else math.nan
    if math.isnan(width):  # rounds not kept (older records): the processes' range
        low, high = rec["time_low_s"], rec["time_high_s"]
    else:
        low, high = rerun.interval(rec["time_median_s"], width)
    out = {"low": low, "high": high, "lowest": rec["time_low_s"], "highest": rec["time_high_s"],
           "processes": rec["processes"]}
    modes = measure.modes_of(rec["rounds"]) if rec.get("rounds") else rec.get("modes")  # from what was measured
    if modes:
        out["modes"] = "; ".join(mode(m) for m in modes)
        if rec.get("rounds") and not math.isnan(width) and measure.memory_states(modes):
            out.update(_faster(logs, modes[0]["processes"], prior))
    return out


def _faster(logs: np.ndarray, processes: int, prior: float | None) -> dict:
    """The faster mode's time over its own processes (the ``processes`` fastest) and where a rerun's lands: what
    the case runs at when its process draws the better state (its allocator keeps its buffers, say)."""
    fast = np.sort(logs)[:processes]
    value = float(np.exp(np.median(fast)))
    width = rerun.half_width(fast, prior) if prior is not None or len(fast) > 1 else math.nan
    if math.isnan(width):
        return {"fast": value}
    low, high = rerun.interval(value, width)
    return {"fast": value, "fast_low": low, "fast_high": high}


def mode(mode: dict) -> str:
    text = f"{mode['time_s'] * 1e3:.3g} ms in {mode['processes']} process{'es' if mode['processes'] > 1 else ''}"
    if mode.get("faults_per_call") is not None:
        text += f", {mode['faults_per_call']:.0f} page faults per call"
    return text


def per_time(spans: dict, count: float) -> dict:
    """A rate's faster-mode figure and interval (``count`` over the faster mode's time and its interval's ends)."""
    return {k: count / spans[t] for k, t in (("fast", "fast"), ("fast_low", "fast_high"), ("fast_high", "fast_low"))
            if t in spans}


#: the metric of a thread count's speed-up over one thread, taken process by process (``speedups``)
SPEEDUP = "speedup_per_process"
#: a time row's fields that a ratio of two times does not carry
_TIME_ONLY = ("q25", "q75", "iqr", "samples", "lowest", "highest", "modes", "fast", "fast_low", "fast_high")


def ratio_logs(first: dict, second: dict) -> np.ndarray:
    """The logs of ``first``'s time over ``second``'s, process by process: over the rounds the two records were
    timed in by one process (a round's process times every case of the grid, one after another)."""
    other = {r["pid"]: r["median_s"] for r in second.get("rounds") or () if r.get("pid") and r.get("median_s")}
    return np.array([math.log(r["median_s"] / other[r["pid"]]) for r in first.get("rounds") or ()
                     if r.get("pid") in other and r.get("median_s")])


#: a process whose control GEMM (``benchmarks.core.hardware.control``, timed just before and after each case) ran
#: below SHORT of the run's usual rate at that thread count had less of the cores than the run usually got: the
#: host ran something else on them, which /proc/stat's counts inside a VM do not show (on the 2-core VM, 2-thread
#: controls of 102-170 GFLOP/s against 190-195 when quiet, and the thread speed-ups of those processes moved most)
SHORT = 0.9


def round_controls(records: list[dict]) -> dict[int | None, list[float]]:
    """Every CPU round's control GEMM rate (FLOP/s), per thread count of its record."""
    rates: dict[int | None, list[float]] = {}
    for rec in records:
        for r in rec.get("rounds") or ():
            if r.get("control_flops_per_s"):
                rates.setdefault(rec.get("threads"), []).append(r["control_flops_per_s"])
    return rates


def usual_controls(records: list[dict]) -> dict[int | None, float]:
    """The run's usual control rate per thread count: the 95th percentile of every CPU round's control GEMM rate."""
    return {t: float(np.percentile(x, 95)) for t, x in round_controls(records).items()}


def short_processes(first: dict, second: dict, usual: dict[int | None, float]) -> int:
    """Of the processes that timed both records, how many ran one of them with its control GEMM below SHORT of the
    run's ``usual`` rate at its thread count (``usual_controls``)."""
    def short(rec: dict) -> set:
        floor = SHORT * usual.get(rec.get("threads"), 0.0)
        return {r["pid"] for r in rec.get("rounds") or () if r.get("control_flops_per_s") and
                r["control_flops_per_s"] < floor}
    both = {r.get("pid") for r in first.get("rounds") or ()} & {r.get("pid") for r in second.get("rounds") or ()}
    return len(both & (short(first) | short(second)))


def speedups(records: list[dict], rows: list[dict]) -> list[dict]:
    """SPEEDUP rows of the threads area: each workload's time on one thread over its time on p threads, taken in
    each process that timed both, seconds apart (``ratio_logs``), so that what a process draws and the machine's
    moment move both sides alike; the median over those processes, with the interval where a rerun's lands (their
    spread moderated by the other workloads', ``rerun.half_width``), and how many of them had the cores short
    (``short_processes``: the host's share, which a speed-up over threads feels on one side only). Beside each
    p-thread case's time row (``rows``); none where fewer than two processes timed both."""
    ok = {(r["params"].get("workload"), r["params"].get("threads")): r for r in records
          if r["area"] == "threads" and r["method"] == "forward" and r["status"] == "ok" and r.get("rounds")}
    logs = {key: x for key, rec in ok.items() if key[1] != 1 and (one := ok.get((key[0], 1))) is not None
            and len(x := ratio_logs(one, rec)) > 1}
    prior = rerun.typical_variance(list(logs.values())) if logs else None
    usual = usual_controls(records)
    out = []
    for (workload, threads), x in logs.items():
        time = next((r for r in rows if r["area"] == "threads" and r["method"] == "forward" and r["metric"] == "time"
                     and r.get("workload") == workload and r.get("threads") == threads), None)
        if time is None:
            continue
        value = float(np.exp(np.median(x)))
        low, high = rerun.interval(value, rerun.half_width(x, prior))
        out.append({k: v for k, v in time.items() if k not in _TIME_ONLY}
                   | {"metric": SPEEDUP, "unit": "x", "value": value, "low": low, "high": high, "processes": len(x),
                      "short_processes": short_processes(ok[(workload, 1)], ok[(workload, threads)], usual)})
    return out
