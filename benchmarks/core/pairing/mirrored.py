"""Two versions of the models timed in the same moments: the regression gate's measurement and statistics.

A shared machine's speed drifts by tens of per cent over seconds to minutes, so two separate runs of one
commit disagree by more than the 10% slowdown a gate must see. Here each version runs in a worker process
of its own (``mirrored_worker``: this checkout's case definitions, that version's ``transformer``), and one
controller alternates them in mirrored blocks, A B B A then B A A B, over many short rounds: a drift
that is linear over a round falls on both sides alike and cancels in the round's ratio (B's two blocks
over A's). Three things would still set one side apart: the idle side's OpenMP threads spinning while the
other side runs (in the default wait policy libgomp's threads spin a while before they sleep; on a 2-core VM
that made an unchanged case read 1.3-1.6x slower), so the controller pauses ``HANDOVER_S`` before each block
of the other worker, and both run in the users' default wait policy (``scripts/regime_effects.py`` measures
what the pause and the passive policy change); what one process happens to get (its memory, its place on the
cores: a few per cent, persistent for the process) and glibc's allocator: a case whose intermediates are
megabytes (the math backend's n x n scores) gets them from fresh pages or from memory already mapped
depending on where its tensors happen to lie, so one process timed the same case at 14 ms and another at
28 ms (2x, per instance, page faults); the gate's workers fix that policy (``FIXED_ALLOCATOR``: every
allocation from the heap, none given back), which made both modes one. So the
workers are started afresh every SESSION_ROUNDS rounds, and a case's interval is bootstrapped over
sessions, then rounds within them: a process pair's own offset widens the interval instead of passing for
a change. Each case's ratio is the trimmed mean of its rounds' log ratios; ``verdict`` turns it into
slower / faster / unchanged / inconclusive against a threshold.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass

import numpy as np

from ..hardware.machine import BUSY_SHARE, cpu_counters, others_cpu_share
from .workers import WORKER_TIMEOUT_S, Worker

#: the share of rounds cut from each end of the log ratios before their mean: the interquartile mean. A
#: burst from elsewhere (seen here: 2x for about 100 ms, one or two blocks) makes a round's ratio 0.4 or
#: 1.9; on this VM one round in eight or so, in clusters, which a 10% trim left in
TRIM = 0.25
#: bootstrap resamples for a ratio's interval, and the interval's confidence
RESAMPLES, CONFIDENCE = 4000, 0.95
#: rounds every pair gets whatever the budget: the fewest an interval can be drawn from
FEWEST_ROUNDS = 2
#: seconds past the budget a worker may take to answer one block before it counts as stopped (a stopped or
#: starved process is named then, instead of holding the command past its budget)
STALL_GRACE_S = 10.0
#: rounds per pair of worker processes
SESSION_ROUNDS = 6
#: calls that warm a case in a new session once its blocks are sized (as many as the first session's probe makes)
WARM_CALLS = 2
#: OpenMP threads that sleep as soon as they wait: not how the models are timed (passive waits made a small
#: operator's call up to 5x slower), but a setting whose effect ``scripts/regime_effects.py`` measures
IDLE_PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}
#: seconds the controller pauses before a block of another worker than the last block's, so that the worker that
#: just finished stops spinning: libgomp's threads, waiting in the default policy, spin for a while (about
#: 300,000 pause instructions) before they sleep, on the cores the other worker is about to be timed on
HANDOVER_S = 0.02
#: glibc's allocator fixed: every allocation from the heap, none given back (the gate's workers; see above; and
#: C2's pairs, a kernel's rate). Not for C1's or C3's ratios: the grid times its cases with the default allocator,
#: whose page faults on large tensors are part of their cost (64 heads' 134 MB of scores: half of their time here)
FIXED_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**34)}
VERDICTS = ("slower", "faster", "unchanged", "inconclusive")
#: a case as the workers build it: (area, params, method)
Case = tuple[str, dict, str]


def round_ratio(a: list[float], b: list[float]) -> float:
    """One round's ratio, B over A, from its mirrored blocks (A B B A: ``a`` = [A1, A2], ``b`` = [B1, B2]):
    a drift linear in time adds the same to A1 + A2 as to B1 + B2."""
    return sum(b) / sum(a)


def busy_rounds(shares: list[float | None] | None) -> tuple[list[float], list[float]]:
    """(the shares above BUSY_SHARE, every share measured) of rounds whose share of the cores others used is
    ``shares`` (``MirroredRounds.others``; None where it was not measured)."""
    measured = [s for s in shares or () if s is not None]
    return [s for s in measured if s > BUSY_SHARE], measured


def busy(shares: list[float | None] | None) -> str | None:
    """'2 of 3 rounds timed while other processes used more than 50% of the cores (68%, 91%)' where some of the
    rounds whose share of the cores others used is ``shares`` (``MirroredRounds.others``) were: slower and noisier
    than on a quiet machine; else None."""
    over, measured = busy_rounds(shares)
    if not over:
        return None
    return (f"{len(over)} of {len(measured)} rounds timed while other processes used more than {BUSY_SHARE:.0%} of "
            f"the cores ({', '.join(f'{s:.0%}' for s in over)})")


def trimmed_mean(values: np.ndarray, trim: float = TRIM) -> float:
    values = np.sort(np.asarray(values, dtype=float))
    cut = int(len(values) * trim)
    return float(values[cut : len(values) - cut].mean())


def _trimmed_means_of_rows(rows: np.ndarray, trim: float = TRIM) -> np.ndarray:
    """Each row's trimmed mean over its values that are not NaN (rows of unequal length, padded with NaN)."""
    rows = np.sort(rows, axis=1)  # NaN last
    n = (~np.isnan(rows)).sum(axis=1)
    cut = (n * trim).astype(int)
    sums = np.concatenate([np.zeros((len(rows), 1)), np.cumsum(np.nan_to_num(rows), axis=1)], axis=1)
    picked = np.arange(len(rows))
    return (sums[picked, n - cut] - sums[picked, cut]) / (n - 2 * cut)


@dataclass
class Estimate:
    """A case's paired ratio (head time over base time) with its interval, over ``rounds`` rounds."""

    ratio: float
    low: float
    high: float
    rounds: int

    def verdict(self, threshold: float) -> str:
        """``slower``: at least ``threshold`` slower (ratio >= 1 + threshold) with the whole interval above 1;
        ``faster`` the mirror of it; ``unchanged``: the whole interval within the threshold either way;
        otherwise ``inconclusive`` (more rounds, or a quieter machine, would tell)."""
        top, bottom = 1 + threshold, 1 / (1 + threshold)
        if self.ratio >= top and self.low > 1:
            return "slower"
        if self.ratio <= bottom and self.high < 1:
            return "faster"
        if bottom <= self.low and self.high <= top:
            return "unchanged"
        return "inconclusive"


def estimate(ratios: list[float], sessions: list[int] | None = None, seed: int = 0) -> Estimate:
    """The paired estimate of per-round ratios: exp of the trimmed mean of their logs, and the CONFIDENCE
    bootstrap interval of that, resampling the sessions (``sessions``: each round's pair of worker
    processes; default one), then the rounds within each, so that what one pair of processes got widens the
    interval instead of passing for a change; each resample pools its rounds and trims them as the estimate
    does (seeded: the same rounds give the same interval)."""
    logs = np.log(np.asarray(ratios, dtype=float))
    if len(logs) < 2:
        r = float(np.exp(logs.mean())) if len(logs) else math.nan
        return Estimate(r, 0.0, math.inf, len(logs))
    sessions = np.zeros(len(logs), dtype=int) if sessions is None else np.asarray(sessions)
    groups = [logs[sessions == s] for s in np.unique(sessions)]
    padded = np.full((len(groups), max(len(g) for g in groups)), np.nan)
    for row, g in zip(padded, groups, strict=True):
        row[: len(g)] = g
    sizes = np.array([len(g) for g in groups])
    rng = np.random.default_rng(seed)
    picked = rng.integers(len(groups), size=(RESAMPLES, len(groups)))  # sessions, then rounds within each
    size = sizes[picked][..., None]
    rounds = (rng.random((RESAMPLES, len(groups), padded.shape[1])) * size).astype(int)
    drawn = np.where(np.arange(padded.shape[1]) < size, padded[picked[..., None], rounds], np.nan)
    means = _trimmed_means_of_rows(drawn.reshape(RESAMPLES, -1))
    tail = (1 - CONFIDENCE) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Estimate(float(np.exp(trimmed_mean(logs))), float(np.exp(low)), float(np.exp(high)), len(logs))


def _settle(worker: Worker) -> dict:
    """What a warm-up request adds for ``worker``: ``settle`` where it asks for it."""
    return {"settle": worker.settle} if worker.settle else {}


@dataclass(frozen=True)
class Side:
    """One side of a comparison: case ``case`` (an index into the workers' cases) in ``worker``."""

    worker: Worker
    case: int

    @property
    def key(self) -> tuple[int, int]:
        return id(self.worker), self.case


class MirroredRounds:
    """Pairs of sides timed in mirrored blocks over rounds, each pair's per-round ratio (b over a).

    ``workers`` each build every case of ``todo`` (or, where it is a dict, the cases it lists for the worker's
    label: workers in different regimes, each with its own cases); a pair's two sides may be one case in two
    workers (the gate: base against head) or two cases in one worker (a verdict's ratio: the RNN against the
    Transformer). Every ``session_rounds`` rounds the workers start afresh (the one started first alternates),
    and each side is warmed before it is timed again; a pair's blocks last about ``block_s`` (at least one
    call), sized once from its slower side."""

    def __init__(self, workers: list[Worker], todo: list[Case] | dict[str, list[Case]], pairs: list[tuple[Side, Side]],
                 block_s: float, handover_s: float = 0.0, session_rounds: int = SESSION_ROUNDS):
        self.workers, self.todo, self.pairs, self.block_s = workers, todo, pairs, block_s
        self.session_rounds = session_rounds  # rounds per pair of worker processes
        self.handover_s = handover_s  # the pause before a block of another worker than the last block's
        self.ratios: list[list[float]] = [[] for _ in pairs]
        self.sessions: list[list[int]] = [[] for _ in pairs]  # each round's set of worker processes
        self.times: list[dict[str, list[float]]] = [{"a": [], "b": []} for _ in pairs]
        # each round's minor page faults per call of each side, over its blocks (None where a worker does not say)
        self.faults: list[list[dict[str, float | None]]] = [[] for _ in pairs]
        # each round's share of the cores that processes other than the controller and its workers used while the
        # pair's blocks ran (``machine.others_cpu_share``; None where /proc is not there)
        self.others: list[list[float | None]] = [[] for _ in pairs]
        self.calls: list[int] = []
        self.skipped: dict[int, str] = {}
        self.settled: set[int] = set()  # pairs timed enough: left out of later rounds (``run``'s ``settled``)
        self.session = -1
        self.session_started_at: list[str] = []  # when each session's workers started (UTC, ISO 8601)
        self.deadline = math.inf  # when the budget of ``run`` ends (time.monotonic)
        self._last: Worker | None = None  # the worker that timed the last block

    def start(self) -> None:
        """Start the workers that time a pair still (``needed``; again, for a new session), build every case and
        warm each pair's sides (a new process's first calls grow its heap: up to 2x slower): the first time with a
        probe (a warm-up call and one timed call), which sizes each pair's blocks; later with WARM_CALLS calls, or
        one where a block is one call (a slow case: its warm-up is most of a session's start)."""
        self.session += 1
        self.session_started_at.append(dt.datetime.now(dt.timezone.utc).isoformat())
        needed = self.needed()
        order = needed if self.session % 2 == 0 else needed[::-1]
        self.stop()
        for worker in order:  # the workers build their cases at once (nothing is timed until all have)
            worker.launch(self.todo[worker.label] if isinstance(self.todo, dict) else self.todo)
        failed = {}
        for worker in order:  # a worker not started builds nothing and fails nothing
            for i, error in enumerate(worker.built()):
                if error:
                    failed[id(worker), i] = f"{worker.label}: {error}"
        for p, (a, b) in enumerate(self.pairs):
            for side in (a, b):
                if side.key in failed:
                    self.skipped.setdefault(p, failed[side.key])
        if self.calls:
            self._warm()
            return
        probed = {}
        for p, pair in enumerate(self.pairs):
            if p not in self.skipped:
                for side in pair:
                    if side.key not in probed:
                        probed[side.key] = side.worker.ask({"probe": side.case, **_settle(side.worker)},
                                                           self.block_timeout())["seconds"]
        self.calls = [0 if p in self.skipped else max(1, round(self.block_s / max(probed[a.key], probed[b.key])))
                      for p, (a, b) in enumerate(self.pairs)]

    def needed(self) -> list[Worker]:
        """The workers a session starts: those with a side of a pair still timed (every one before the first
        round: the probes size every pair's blocks)."""
        if not self.calls:
            return self.workers
        live = {id(side.worker) for p, pair in enumerate(self.pairs) if p not in self.skipped and p not in self.settled
                for side in pair}
        return [w for w in self.workers if id(w) in live]

    def _warm(self) -> None:
        calls: dict[tuple[str, int], tuple[Side, int]] = {}
        for p, pair in enumerate(self.pairs):
            if p not in self.skipped and p not in self.settled:
                for side in pair:
                    calls[side.key] = side, max(calls.get(side.key, (side, 0))[1], min(WARM_CALLS, self.calls[p]))
        for side, n in calls.values():
            side.worker.ask({"warm": side.case, "calls": n, **_settle(side.worker)}, self.block_timeout())

    def round(self, r: int) -> None:
        """One round over every pair: a b b a on even rounds, b a a b on odd ones."""
        if r and r % self.session_rounds == 0:
            self.start()
        for p, (a, b) in enumerate(self.pairs):
            if p in self.skipped or p in self.settled:
                continue
            first, second = ("a", "b") if r % 2 == 0 else ("b", "a")
            got, faults = {"a": [], "b": []}, {"a": [], "b": []}
            pids = self.pids()
            before = cpu_counters(pids)
            for name in (first, second, second, first):
                side = a if name == "a" else b
                if self.handover_s and side.worker is not self._last:
                    time.sleep(self.handover_s)  # the other worker's threads stop spinning and sleep
                self._last = side.worker
                answer = side.worker.ask({"case": side.case, "calls": self.calls[p]}, self.block_timeout())
                got[name].append(answer["seconds"])
                faults[name].append(answer.get("faults"))
            self.others[p].append(others_cpu_share(before, cpu_counters(pids)))
            self.ratios[p].append(round_ratio(got["a"], got["b"]))
            self.sessions[p].append(r // self.session_rounds)
            self.faults[p].append({k: None if None in f else sum(f) / len(f) for k, f in faults.items()})
            for name in got:
                self.times[p][name].extend(got[name])

    def pids(self) -> list[int]:
        """The workers' process ids: their CPU time is the measurement's own, not another process's."""
        return [w.proc.pid for w in self.workers if getattr(w, "proc", None) is not None]

    def block_timeout(self) -> float:
        """Seconds one block may take: what is left of the budget and STALL_GRACE_S, at most WORKER_TIMEOUT_S."""
        return min(WORKER_TIMEOUT_S, max(0.0, self.deadline - time.monotonic()) + STALL_GRACE_S)

    def measured_rounds(self) -> int:
        """Rounds measured so far (by the pair measured most: a run stopped mid-round counts that round)."""
        return max((len(r) for r in self.ratios), default=0)

    def estimates(self) -> list[Estimate | None]:
        pairs = enumerate(zip(self.ratios, self.sessions, strict=True))
        return [None if p in self.skipped else estimate(r, s) for p, (r, s) in pairs]

    def stop(self) -> None:
        for worker in self.workers:  # all asked to end first: they end at once
            worker.quit()
        for worker in self.workers:
            worker.stop()

    def run(self, done, budget: float, min_rounds: int, max_rounds: int, progress=None, settled=None,
            fewest: int = FEWEST_ROUNDS, first: int = 0) -> int:
        """Rounds until ``done(estimates)`` (asked every other round from ``min_rounds`` on), the ``budget``
        (seconds) is spent (after ``fewest`` rounds at least) or ``max_rounds`` are measured;
        ``progress(rounds, estimates, seconds)`` is told each time the estimates are made. With ``settled``
        (an estimate -> bool), a pair whose estimate it accepts from ``min_rounds`` on is left out of later
        rounds, so that the budget goes to the pairs still short of it. ``first``: the rounds already measured
        (round ``first`` is the next). Returns the rounds measured."""
        started, r = time.monotonic(), first
        self.deadline = started + budget
        while r < max_rounds:
            self.round(r)
            r += 1
            # a ratio's interval needs two rounds: a budget spent before them (a busy machine) ends nothing
            out_of_time = time.monotonic() - started > budget and r >= fewest
            if not out_of_time and (r < min_rounds or r % 2):
                continue  # the bootstrap costs a little: every other round is soon enough
            estimates = self.estimates()
            if settled is not None and r >= min_rounds:
                self.settled |= {p for p, e in enumerate(estimates) if e is not None and settled(e)}
            if progress:
                progress(r, estimates, time.monotonic() - started)
            if out_of_time or r >= min_rounds and done(estimates):
                break
        return r
