"""Measuring one case: time with median and IQR, achieved FLOP/s against the machine's GEMM peak,
GPU peak memory and NVML telemetry, and the operators the call executes (``opgraph``: what the
performance model prices). Shared by the asv tracks and the in-process runner.

Timing is torch.utils.benchmark's ``blocked_autorange``: blocks of calls long enough to swamp the
timer's overhead, repeated for at least ``min_run_time`` seconds; the median and the interquartile
range are over the per-call times of those blocks. A method may be timed in several rounds (the
runner's ``--rounds``); ``combined`` makes one record of them.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import resource
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.utils.benchmark as tbench

from ...area import Prepared, Skip, using_threads
from ..hardware import constants
from ..hardware.control import control_flops_per_s, threads_left_alone
from ..hardware.machine import cpu_counters, others_cpu_share
from . import graph_cache, telemetry

# The control (``hardware.control``: a small GEMM timed for a moment) is timed just before and just after every
# CPU method, at the method's thread count. A shared machine's slow and fast moments move both alike, so
# time x control / (the run's median control) is steadier from run to run than the raw time (reports.tidy:
# metric ``time_normalised``).

#: a time over fewer values than this (timed blocks, or rounds) has no measured spread: one call of a
#: 0.5 s model is one block, and its IQR of 0 says nothing about how steady it is
MIN_SAMPLES = 3
#: two processes' medians of one case further apart than this (relative), and than MODE_SPREADS times the
#: larger of their own spreads (IQR over median of their blocks), are two modes: what a process happens to
#: get (its pages, its place on the cores) sets its speed, and the case runs at one of two speeds per process
MODE_GAP, MODE_SPREADS = 0.10, 3.0
#: two processes whose minor page faults per call differ by more than FAULT_PAGES and by a factor
#: FAULT_FACTOR run the case in two memory states: in one the C library's allocator gives a large buffer
#: back to the OS after each call and the next call faults fresh pages in (4 KiB each), in the other it
#: keeps the memory; which one a process gets is its draw (math attention at n = 128 on a CPU, at about
#: twice the time). A round's count also holds its warm-up's first faults, spread over its few calls, so
#: the factor is modest. Processes split so are two modes even when their own blocks are too spread for
#: MODE_SPREADS to tell.
FAULT_PAGES, FAULT_FACTOR = 256, 2.0
#: a process whose timed calls each fault in more than FAULT_PAGES pages may still be settling into its memory
#: state (the C library's allocator adapts its large-buffer threshold over the first calls); a cheap case (a
#: call in at most CHEAP_SHARE of the round's time) calls the case up to SETTLE_CALLS more times, until one
#: call faults in no more than FAULT_PAGES, and is timed again, so that its round measures the state it settled in
SETTLE_CALLS, CHEAP_SHARE = 3, 0.5
#: a process in the slower memory state faults its intermediates in afresh on every call: more than STATE_PAGES
#: pages (16 MiB) per call (math attention at n = 128, batch x n = 4096 tokens: 10,000-16,000 here); a warm-up's
#: first faults spread over a round's calls stay below it (up to about 3,300 pages per call here)
STATE_PAGES = 16 * FAULT_PAGES


@dataclass
class Timing:
    """Seconds per call: median, quartiles and IQR over ``blocks`` blocks of ``calls_per_block`` calls; ``untimed``:
    the calls run around them that were not timed (warm-ups)."""

    median: float
    q25: float
    q75: float
    blocks: int
    calls_per_block: int
    untimed: int = 0

    @property
    def iqr(self) -> float:
        return self.q75 - self.q25

    @property
    def calls(self) -> int:
        return self.blocks * self.calls_per_block


def blocked_timing(fn: Callable[[], Any], min_run_time: float = 0.2) -> Timing:
    """Time ``fn`` (synchronizing its device) at the current thread count; blocked_autorange's block-size
    estimate runs it at least once before the timed blocks (its warm-up). When that gave fewer than
    MIN_SAMPLES blocks and the missing ones cost no more than ``min_run_time`` again, they are timed too,
    so that the quartiles measure a spread (a 0.15 s call in 0.2 s of timing is otherwise two blocks);
    a slower call keeps what it has, and its record says how few values its time is over. ``untimed`` counts
    the warm-ups' calls: the block-size estimate's (1, 10, ... up to a block's: 1 + 10 + ... + n) and each top-up's
    own (``Timer.timeit`` runs max(n // 100, 2) first)."""
    timer = tbench.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    with threads_left_alone():
        m = timer.blocked_autorange(min_run_time=min_run_time)
        n, times = m.number_per_run, list(m.times)
        untimed = (10 * n - 1) // 9
        missing = MIN_SAMPLES - len(times)
        if 0 < missing and missing * n * m.median <= min_run_time:
            times += [timer.timeit(n).median for _ in range(missing)]
            untimed += missing * max(n // 100, 2)
    q25, median, q75 = np.percentile(times, [25, 50, 75])
    return Timing(float(median), float(q25), float(q75), len(times), n, untimed)


def gpu_peak_memory(fn: Callable[[], Any], device: str) -> int:
    """Bytes the CUDA caching allocator held at most during one call."""
    if device != "cuda":
        raise Skip("GPU peak memory is measured on CUDA devices only")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    return torch.cuda.max_memory_allocated()


def gpu_telemetry(fn: Callable[[], Any], device: str, min_time: float = 1.0) -> telemetry.Telemetry:
    if device != "cuda":
        raise Skip("GPU telemetry is measured on CUDA devices only")
    if not telemetry.available():
        raise Skip("NVML does not answer on this machine")
    return telemetry.sample(fn, torch.cuda.current_device(), min_time=min_time)


def timed_round(fn: Callable[[], Any], device: str, min_run_time: float) -> dict:
    """One round of timing: ``blocked_timing`` for ``min_run_time`` seconds, with the control GEMM (CPU) just
    before and just after it (their geometric mean), the share of the cores other processes used while it
    was timed (``machine.others_cpu_share``; CPU cases), the process's minor page faults per call
    (``faults_per_call``: over every call of the round, the warm-ups' included: what a call faults in as it
    runs on, plus the first calls' one-time faults spread over them) and when it started. A cheap CPU case
    whose calls fault heavily settles first and is timed again (SETTLE_CALLS)."""
    control = device == "cpu"
    started = dt.datetime.now(dt.timezone.utc).isoformat()
    before = control_flops_per_s() if control else None
    counters = cpu_counters() if control else None
    timing, faults = _faulting(fn, min_run_time)
    if control and cheap(timing.median, min_run_time) and faults > FAULT_PAGES * timing.calls:
        settle(fn)
        timing, faults = _faulting(fn, min_run_time)
    others = others_cpu_share(counters, cpu_counters()) if control else None
    after = control_flops_per_s() if control else None
    return {"started_at": started, "pid": os.getpid(), "median_s": timing.median, "q25_s": timing.q25,
            "q75_s": timing.q75,
            "blocks": timing.blocks, "calls_per_block": timing.calls_per_block,
            "control_flops_per_s": (before * after) ** 0.5 if control else None, "others_cpu_share": others,
            "faults_per_call": faults / (timing.calls + timing.untimed)}


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _faulting(fn: Callable[[], Any], min_run_time: float) -> tuple[Timing, int]:
    """``blocked_timing(fn, min_run_time)`` and the minor page faults the process took meanwhile."""
    faults = _minor_faults()
    timing = blocked_timing(fn, min_run_time)
    return timing, _minor_faults() - faults


def cheap(seconds: float, min_run_time: float) -> bool:
    """Whether a call of ``seconds`` is cheap enough to settle in a round of ``min_run_time`` (CHEAP_SHARE)."""
    return seconds <= CHEAP_SHARE * min_run_time


def settle(fn: Callable[[], Any], most: int = SETTLE_CALLS) -> None:
    """Call ``fn`` until one call faults in no more than FAULT_PAGES pages, ``most`` calls at most."""
    for _ in range(most):
        before = _minor_faults()
        fn()
        if _minor_faults() - before <= FAULT_PAGES:
            return


def faulting_throughout(rounds: list[dict], min_run_time: float) -> bool:
    """Whether every process so far faulted in more than FAULT_PAGES pages per call of a case cheap enough to
    settle (``cheap``): each may have drawn the slower memory state, and a further process may draw the other."""
    return bool(rounds) and all((r.get("faults_per_call") or 0) > FAULT_PAGES and cheap(r["median_s"], min_run_time)
                                for r in rounds)


def combined(rounds: list[dict]) -> dict:
    """A record's time fields from its rounds (``timed_round``): the median over rounds of each round's
    median; the quartiles of one round's blocks, or with several rounds those of the round medians (the
    spread that separates two runs on a shared machine is the one between moments minutes apart, which
    the blocks of one round, seconds apart, do not see); ``samples``, how many values the quartiles are
    over (fewer than MIN_SAMPLES: no spread measured); the blocks of all rounds; the median control and the
    median share of the cores other processes used while it was timed (``others_cpu_share``); with
    several rounds also the best round's median (``time_best_round_s``): on a shared machine whose
    neighbours only ever slow it down, the round least disturbed. With rounds from several processes
    (each round in a fresh one: the runner's ``--rounds``), ``processes`` counts them, ``time_low_s`` and
    ``time_high_s`` are the lowest and highest round median (the interval over processes, which includes
    what each process happened to get) and ``modes`` lists two levels when the processes disagree beyond
    their own spread (``modes_of``)."""
    med = lambda key: float(statistics.median(r[key] for r in rounds))  # noqa: E731
    controls = [r["control_flops_per_s"] for r in rounds if r["control_flops_per_s"]]
    others = [r["others_cpu_share"] for r in rounds if r.get("others_cpu_share") is not None]
    if len(rounds) > 1:
        q25, q75 = (float(q) for q in np.percentile([r["median_s"] for r in rounds], [25, 75]))
    else:
        q25, q75 = rounds[0]["q25_s"], rounds[0]["q75_s"]
    fields = {"time_median_s": med("median_s"), "time_q25_s": q25, "time_q75_s": q75, "time_iqr_s": q75 - q25,
              "samples": len(rounds) if len(rounds) > 1 else rounds[0]["blocks"],
              "blocks": sum(r["blocks"] for r in rounds), "calls_per_block": rounds[-1]["calls_per_block"],
              "control_flops_per_s": float(statistics.median(controls)) if controls else None,
              "others_cpu_share": float(statistics.median(others)) if others else None, "rounds": rounds,
              "processes": len({r["pid"] for r in rounds if r.get("pid") is not None}) or None}
    if len(rounds) > 1:
        fields["time_best_round_s"] = min(r["median_s"] for r in rounds)
        fields["time_low_s"], fields["time_high_s"] = min(r["median_s"] for r in rounds), max(
            r["median_s"] for r in rounds)
    if (fields["processes"] or 0) > 1:
        fields["modes"] = modes_of(rounds)
    return fields


def modes_of(rounds: list[dict]) -> list[dict] | None:
    """Two levels of a case timed in several processes, or None. Where the rounds ran in two memory states
    (``fault_states``), those; else the round medians sorted, split at their widest gap; two modes when that gap
    passes MODE_GAP and either MODE_SPREADS times the larger spread (IQR over median of its blocks) of the two
    rounds beside it, where both timed MIN_SAMPLES blocks or more (fewer measure no spread), or the page faults
    per call of the two sides differ as FAULT_PAGES and FAULT_FACTOR say. Each mode: its median time, how many
    processes (rounds) ran at it and, where the rounds counted them, their median page faults per call."""
    states = fault_states(rounds)
    if states is not None:
        return states
    ordered = sorted(rounds, key=lambda r: r["median_s"])
    gaps = [ordered[i + 1]["median_s"] / ordered[i]["median_s"] - 1 for i in range(len(ordered) - 1)]
    if not gaps:
        return None
    at = int(np.argmax(gaps))
    parts = (ordered[: at + 1], ordered[at + 1 :])
    beside = ordered[at : at + 2]
    own = max((r["q75_s"] - r["q25_s"]) / r["median_s"] for r in beside)
    known = all(r.get("blocks", MIN_SAMPLES) >= MIN_SAMPLES for r in beside)  # a round of 1 or 2 blocks: no spread
    faults = [_median_faults(part) for part in parts]
    if gaps[at] <= MODE_GAP or ((not known or gaps[at] <= MODE_SPREADS * own) and not fault_split(*faults)):
        return None
    return _modes(parts)


def fault_states(rounds: list[dict]) -> list[dict] | None:
    """The rounds as two memory states by their page faults per call, or None: a round that faults in more than
    STATE_PAGES pages each call is of the slower state, one that faults in at most FAULT_PAGES of the faster, and
    one between joins the state whose time is nearer (log scale); two states where each has a round, the slower
    runs slower by more than MODE_GAP and ``memory_states`` holds. A round that faulted afresh on every call but
    ran nearer the faster level (a quiet moment of a shared machine) stays with its state, where the widest gap
    in time would group it with the rounds that did not fault."""
    if any(r.get("faults_per_call") is None for r in rounds):
        return None
    fast = [r for r in rounds if r["faults_per_call"] <= FAULT_PAGES]
    slow = [r for r in rounds if r["faults_per_call"] > STATE_PAGES]
    if not fast or not slow:
        return None
    level = [math.log(statistics.median(r["median_s"] for r in part)) for part in (fast, slow)]
    if level[1] - level[0] <= math.log1p(MODE_GAP):
        return None
    for r in rounds:
        if FAULT_PAGES < r["faults_per_call"] <= STATE_PAGES:
            nearer_slow = abs(math.log(r["median_s"]) - level[1]) < abs(math.log(r["median_s"]) - level[0])
            (slow if nearer_slow else fast).append(r)
    modes = _modes((fast, slow))
    return modes if memory_states(modes) else None


def _modes(parts) -> list[dict]:
    """Each part of a case's rounds as a mode: its median time, how many processes ran at it and, where the rounds
    counted them, their median page faults per call."""
    return [{"time_s": float(statistics.median(r["median_s"] for r in part)), "processes": len(part),
             **({"faults_per_call": f} if (f := _median_faults(part)) is not None else {})} for part in parts]


def _median_faults(rounds: list[dict]) -> float | None:
    counted = [r["faults_per_call"] for r in rounds if r.get("faults_per_call") is not None]
    return float(statistics.median(counted)) if counted else None


def memory_states(modes: list[dict] | None) -> bool:
    """Whether two modes (``modes_of``) are the two memory states: the slower faulting in more than STATE_PAGES
    pages each call, which the faster does not (rather than two levels of the machine's speed, or of noise)."""
    if not modes or len(modes) != 2:
        return False
    return two_states(*(m.get("faults_per_call") for m in modes))


def two_states(fast: float | None, slow: float | None) -> bool:
    """Whether page faults a call ``fast`` and ``slow`` are two memory states: apart as ``fault_split`` says, the
    more faulting above STATE_PAGES (a warm-up's few pages are no state)."""
    return fault_split(fast, slow) and slow > STATE_PAGES


def fault_split(fast: float | None, slow: float | None) -> bool:
    """Whether the slower side faults in pages each call that the faster side does not: more than FAULT_PAGES more,
    and at least FAULT_FACTOR times as many (64 heads' scores half kept, 32,769 pages a call, or all afresh, 65,538)."""
    return fast is not None and slow is not None and slow - fast > FAULT_PAGES and slow >= FAULT_FACTOR * fast


def measure(case: Prepared, method: str, *, min_run_time: float = 0.2, peak: float | None = None,
            telemetry_time: float = 1.0, previous: dict | None = None, identity: dict | None = None) -> dict:
    """Every metric of one method of a built case, as a flat dict (one runner record); with this machine's
    GEMM ``peak`` for the case (``machine.calibrate``), its fraction of that peak too. With ``previous``
    (this method's record after its earlier rounds), one more round of timing joins theirs and what is not
    a time (GPU memory and telemetry) is kept from ``previous``, not measured again. ``identity`` ({"area",
    "params"}) names the case, so that what its call executes is counted once per version of the code
    (``graph_cache``)."""
    fn, work, tokens = case.work(method)
    if method == "graph":
        return graph_metrics(case, identity)
    with using_threads(case.threads):
        # no separate warm-up call: blocked_autorange first runs fn to size its blocks, at this thread count,
        # which torch documents as the warm-up; one more call here cost a quarter of the default grid's time
        rounds = (previous or {}).get("rounds", []) + [timed_round(fn, case.device, min_run_time)]
        kept = {k: v for k, v in (previous or {}).items()
                if k.startswith("gpu_") or k in ("energy_per_token_j", "ops", "dispatches")}
        record: dict[str, Any] = {**kept, **combined(rounds),
                                  "threads": torch.get_num_threads() if case.device == "cpu" else None,
                                  "tokens": tokens, "matmul_flops": work.matmul_total,
                                  "other_flops": work.other_total}
        median = record["time_median_s"]
        record.update(achieved_flops_per_s=work.matmul_total / median, tokens_per_s=tokens / median)
        if peak is not None:
            record.update(gemm_peak_flops_per_s=peak, fraction_of_peak=record["achieved_flops_per_s"] / peak)
        if previous is None:  # what the call executes, for the performance model (reports: predicted_time)
            ops, dispatches = graph_cache.counted(identity and {**identity, "method": method}, fn,
                                                  constants.cache_bytes(case.device))
            record.update(ops=ops, dispatches=dispatches)
        if case.device == "cuda" and previous is None:
            record["gpu_peak_memory_bytes"] = gpu_peak_memory(fn, case.device)
            try:
                t = gpu_telemetry(fn, case.device, telemetry_time)
            except Skip:
                pass
            else:
                record.update({f"gpu_{k}": v for k, v in asdict(t).items()},
                              energy_per_token_j=t.energy_per_call_j() / tokens)
    return record


def graph_metrics(case: Prepared, identity: dict | None = None) -> dict:
    """The executed graph of a depth case: sequential depth, launches, and matmul FLOPs (analytic and
    counted on the executed operators); recorded once per version of the code where ``identity`` names the case
    (``graph_cache.depth``)."""
    fn, work, tokens = case.work("graph")
    graph = graph_cache.depth(identity and {**identity, "method": "graph"}, fn)
    return {**graph, "tokens": tokens, "matmul_flops": work.matmul_total}
