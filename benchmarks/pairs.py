"""The ratios the verdicts rest on, each timed in the same moments: both cases of a ratio in mirrored blocks.

    attention-bench pairs                              every pair of the default grid's cases
    attention-bench pairs --kind c1 --budget 300 --record results/pairs/vm.json
    attention-bench pairs --out results/runs/<machine>-default   into a run folder, for its report

A verdict's ratio taken from two separate timings moves with the machine's speed between them (on a shared
2-core VM one five-round command gave C1 as 0.95x one day and 0.72x the next). Here the two cases of each ratio
alternate in mirrored blocks (a b b a, then b a a b) over rounds, each side in a worker process of its own
(``SEPARATE``; C2's two in one), the workers started afresh every round (``mirrored.MirroredRounds``, as the
gate's), and each ratio gets the 95% interval where a rerun's lands (``PairRounds``: from its sessions' means,
their spread moderated by the other pairs'). The pairs:

    c1      per model size and sequence length, the teacher-forced forward pass: RNN time over Transformer
            time (the Transformer's speed-up; below 1, the RNN is faster)
    heads   per strategy, 64 heads of d_model/64 over 1 head of d_model, at equal FLOPs
    c2      per backend, equation (1) at n = C2_SEQ_LENS against the calibration's largest GEMM: the GEMM's time
            over attention's, times attention's matmul FLOPs over the GEMM's, is the fraction of the GEMM's rate
            that attention reaches in the same moments (C2's figure, which a peak calibrated minutes away moves
            with the host's speed), in a worker of its own with glibc's allocator fixed (``KIND_ENV``); where the
            sessions still ran attention in two memory states (``measure.memory_states``, from each block's page
            faults), the fraction is the faster state's, and both are kept

Where a side of a c1 or heads pair ran in two memory states across the sessions, its ratio is over the sessions
of the state more of them drew, both states are kept, and its interval holds both (``in_memory_states``); the
machine keeps them (``kept_states``), so that a later run whose sessions all drew one of them states its interval
over both as well.

Prints one row per pair and saves a record (kind ``pairs``) that ``attention-bench measured`` renders. Rounds go
on until every interval is narrower than ±PRECISION or the budget is spent, after MIN_ROUNDS rounds (each in fresh
workers: a ratio is over three processes at least), and C2's take C2_ROUNDS at least. Ctrl-C (exit code 130) or a
worker that dies or stops answering (2) still saves the ratios measured so far.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from . import cases
from .ceiling import ceiling
from .core import envelope, guards
from .core.hardware import machine
from .core.pairing import kept_states
from .core.pairing.mirrored import FIXED_ALLOCATOR, HANDOVER_S, Side, busy
from .core.pairing.sessions import PairRounds, fraction_of_gemm, in_memory_states
from .core.pairing.workers import Worker, WorkerDied
from .core.records import UnreadableRecord, case_key, commit, pairs_problem, read_json, short

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: rounds per worker process: a ratio's interval is over its sessions (a process's draw is a sample of what a
#: rerun gets), so a budget buys the most sessions at one round each
SESSION_ROUNDS = 1
#: each pair's blocks last about this long (at least one call); rounds at least and at most
BLOCK_S, MIN_ROUNDS, MAX_ROUNDS = 0.05, 3 * SESSION_ROUNDS, 200
#: sessions C2's pairs take at least, whatever the budget: C2's answer should hold within 10% between runs, and a
#: sdpa/GEMM ratio's sessions spread by about 6% (math's by about 12%), so three leave a run's figure a draw of about
#: 4%; the sessions after MIN_ROUNDS start only C2's worker (``MirroredRounds.needed``: the settled pairs' workers
#: stay down), 5-10 s each here
C2_ROUNDS = 5 * SESSION_ROUNDS
#: the record's name in a run folder (the report reads it from there)
RECORD = "pairs-{device}.json"
#: an interval is narrow enough when it spans at most ±PRECISION around the ratio
PRECISION = 0.03
#: what each kind of pair compares: (area, method, the axis that differs, its value on side a, on side b, what
#: the ratio b/a means)
KINDS = {
    "c1": ("models", "forward", "model", "transformer", "rnn-width",
           "Transformer speed-up (RNN time / Transformer time)"),
    "heads": ("multihead", "forward", "heads", 1, 64, "64 heads' cost over 1 head's (time h=64 / time h=1)"),
    "c2": ("attention", "forward", None, "attention", "gemm",
           "the GEMM's time over attention's (x their matmul FLOPs, attention's fraction of the GEMM's rate)"),
}
#: what a kind's worker runs with beyond the command's regime (a named condition, shown with its figures): C2 is a
#: kernel's rate against the GEMM's, so its attention runs with glibc's allocator fixed; with the default allocator
#: the math backend's 17 MB scores come from fresh pages on some calls and not on others, a state that turns
#: with what else the process allocated (12 or 26 ms at n = 128 on the VM: 0 or 8,000-12,000 faults a call),
#: and the grid's curves show that cost with both states
KIND_ENV = {"c2": FIXED_ALLOCATOR}
#: kinds whose two sides each run in a worker process of their own, alternated in mirrored blocks all the same: a
#: user runs one model (one head count) per process, and one process that runs both draws memory states that
#: neither draws alone (glibc's heap is the process's: one side's frees decide whether the other's buffers come
#: from fresh pages). C2's pairs stay in one worker: a kernel against the GEMM beside it, with the allocator fixed
SEPARATE = ("c1", "heads")
#: calls a warm-up may add while a call still faults pages in, in a worker with glibc's allocator fixed (``KIND_ENV``'s,
#: or every worker with --fixed-allocator): then the heap grows over a case's first calls (the math backend at
#: n = 1024 faulted 20 MB a call in the blocks of two sessions of three after the two calls that warm it), then stays
SETTLE_CALLS = 8
#: the sequence lengths C2's pairs time each backend at, those on the grid: where the two CPU backends reach their
#: best fractions (the math backend at the shortest n, its n x n scores 17 MB; the fused kernel at long n)
C2_SEQ_LENS = (128, 1024)


def pairs_of(kind: str, grid: str, device: str) -> list[tuple[tuple[str, dict, str], tuple[str, dict, str]]]:
    """The (case a, case b) pairs of ``kind`` on ``grid``: every case with the axis at a's value, matched
    with the same case at b's value (cases as (area, params, method))."""
    area, method, axis, a, b, _ = KINDS[kind]
    if area not in cases.GRIDS[grid]:
        return []
    if kind == "c2":
        gemm = ("gemm", ceiling(device), method)
        return [((area, params, method), gemm) for params in cases.select(area, grid, device=device)
                if params["seq_len"] in C2_SEQ_LENS and not params["causal"] and params["dtype"] == "float32"
                and params["d_head"] == min(cases.axes(area, grid)["d_head"])]
    out = []
    for params in cases.select(area, grid, device=device, **{axis: a}):
        other = {**params, axis: b}
        if cases.on_grid(area, other, grid) and other in cases.combinations(area, grid):
            if kind != "heads" or params["out_proj"]:  # W_O is in the cost of heads as the paper has them
                out.append(((area, params, method), (area, other, method)))
    return out


def chosen_keys(chosen: list[tuple[str, dict]] | None) -> set[str] | None:
    """The case keys of ``chosen`` (a run's cases, as (area, params): its --area, --param and --device), which
    ``within`` reads; None: every case."""
    return None if chosen is None else {case_key(area, "", params) for area, params in chosen}


def within(pair, chosen: set[str] | None) -> bool:
    """Whether both cases of ``pair`` are among the ``chosen`` ones (``chosen_keys``); the GEMM that C2 holds
    attention to is no grid case, and counts as chosen. None: every pair."""
    return chosen is None or all(area == "gemm" or case_key(area, "", params) in chosen for area, params, _ in pair)


def key(case: tuple[str, dict, str]) -> str:
    area, params, method = case
    return case_key(area, method, params)


class Sessions:
    """Every pair of ``kinds`` (of the ``chosen`` cases: ``within``), timed session by session, each in fresh workers.
    ``one()`` times one session and stops its workers: the main job puts one after each of the grid's rounds, so
    that a ratio's sessions are spread over the run as the grid's rounds are (a state of the machine that lasts a
    minute, such as what a page fault costs, then reaches one session of three, not all three). ``rest(budget)``
    times the sessions after those, until every interval is narrow or the budget is spent (MIN_ROUNDS in all at
    least, C2_ROUNDS for C2's pairs), and ``result()`` gives (rows, rounds, seconds, what stopped it early: None, a
    KeyboardInterrupt or a WorkerDied, the regime the worker ran in). The pairs of a kind with settings of its own
    (``KIND_ENV``) run in a worker of their own, with those settings; each row keeps its worker's."""

    def __init__(self, kinds: list[str], grid: str, device: str, env: dict | None = None,
                 chosen: list[tuple[str, dict]] | None = None):
        keys = chosen_keys(chosen)
        self.listed = [(kind, pair) for kind in kinds for pair in pairs_of(kind, grid, device) if within(pair, keys)]
        self.env = env or {}
        self.envs = {kind: {**self.env, **KIND_ENV.get(kind, {})} for kind in kinds}
        self.workers: dict[str, Worker] = {}  # by label (``_worker``)
        self.worker_env: dict[str, dict] = {}  # each worker's settings, by label
        worker_of = {(kind, side): self._worker(kind, side) for kind in dict.fromkeys(k for k, _ in self.listed)
                     for side in (0, 1)}
        todo = {w: list({key(c): c for kind, pair in self.listed for side, c in enumerate(pair)
                         if worker_of[kind, side] == w}.values()) for w in self.workers}
        index = {w: {key(c): i for i, c in enumerate(cs)} for w, cs in todo.items()}
        self.flops = {key(c): matmul_flops(c) for kind, pair in self.listed if kind == "c2" for c in pair}
        sides = [tuple(Side(self.workers[worker_of[kind, side]], index[worker_of[kind, side]][key(c)])
                       for side, c in enumerate(pair)) for kind, pair in self.listed]
        self.rounds_of = PairRounds(list(self.workers.values()), todo, sides, BLOCK_S, handover_s=HANDOVER_S,
                                    session_rounds=SESSION_ROUNDS)
        self.rounds_of.kinds = [kind for kind, _ in self.listed]
        self.rounds, self.seconds, self.stopped = 0, 0.0, None

    def _worker(self, kind: str, side: int) -> str:
        """The label of the worker that runs side ``side`` (0: a, 1: b) of ``kind``'s pairs, made here where new: a
        SEPARATE kind's side has its own ("c1 rnn-width"); the other kinds share one per set of settings, labelled
        after the first kind that runs in it."""
        env = self.envs[kind]
        label = f"{kind} {KINDS[kind][3 + side]}" if kind in SEPARATE else next(
            (w for w, e in self.worker_env.items() if w in KINDS and e == env), kind)
        if label not in self.workers:
            self.worker_env[label], fixed = env, FIXED_ALLOCATOR.items() <= env.items()
            self.workers[label] = Worker(label, ROOT, ROOT, env, settle=SETTLE_CALLS if fixed else 0)
        return label

    def one(self) -> None:
        """One session (SESSION_ROUNDS rounds) in fresh workers, stopped after it; a KeyboardInterrupt or WorkerDied
        is raised after what was timed is counted."""
        started = time.monotonic()
        try:
            if self.rounds == 0:
                self.rounds_of.start()
            for _ in range(SESSION_ROUNDS):
                self.rounds_of.round(self.rounds)
                self.rounds += 1
        except (KeyboardInterrupt, WorkerDied) as error:
            self.stopped, self.rounds = error, self.rounds_of.measured_rounds()
            raise
        finally:
            self.rounds_of.stop()
            self.seconds += time.monotonic() - started

    def rest(self, budget: float, progress: bool) -> None:
        """The sessions after those timed so far (``one``), until every interval is within ±PRECISION (from
        MIN_ROUNDS rounds on) or ``budget`` seconds are spent, those timed so far included; then C2's, up to
        C2_ROUNDS. A stop is kept (``result``), not raised."""
        started, left = time.monotonic(), budget - self.seconds
        try:
            if self.rounds == 0:
                self.rounds_of.start()
            if self.rounds < MIN_ROUNDS or left > 0 and not self.narrow(self.rounds_of.estimates()):
                self.rounds = self.rounds_of.run(self.narrow, max(0.0, left), MIN_ROUNDS, MAX_ROUNDS,
                                                 self.say(budget) if progress else None, fewest=MIN_ROUNDS,
                                                 first=self.rounds)
            self.rounds = c2_rounds(self.rounds_of, [kind for kind, _ in self.listed], self.rounds)
        except (KeyboardInterrupt, WorkerDied) as error:  # the ratios so far are kept, and the stop is said
            self.stopped, self.rounds = error, self.rounds_of.measured_rounds()
        finally:
            self.rounds_of.stop()
            self.seconds += time.monotonic() - started
            if progress:
                print(file=sys.stderr)

    @staticmethod
    def narrow(estimates) -> bool:
        return all(e.high / e.low <= (1 + PRECISION) / (1 - PRECISION) for e in estimates if e is not None)

    @staticmethod
    def say(budget: float):
        def said(r, estimates, seconds):
            wide = sum(e is not None and e.high / e.low > (1 + PRECISION) / (1 - PRECISION) for e in estimates)
            print(f"\rround {r}: {wide} of {len(estimates)} intervals wider than ±{PRECISION:.0%} ({seconds:.0f} s "
                  f"of {budget:g})", end="", file=sys.stderr, flush=True)
        return said

    def result(self):
        rounds_of, rows = self.rounds_of, []
        for p, ((kind, (pa, pb)), est) in enumerate(zip(self.listed, rounds_of.estimates(), strict=True)):
            area, method, axis, a, b, meaning = KINDS[kind]
            same = {k: v for k, v in pa[1].items() if k != axis}  # c2: every axis of the attention case
            row = {"kind": kind, "meaning": meaning, "area": area, "method": method, "axis": axis, "a": a, "b": b,
                   "params": same, "a_case": key(pa), "b_case": key(pb), "worker_env": self.envs[kind],
                   "separate_workers": kind in SEPARATE}
            if est is None:
                row.update(status="skipped", reason=rounds_of.skipped[p])
            elif len(rounds_of.ratios[p]) < 2:  # what was timed stays, without an interval
                row.update(status="skipped", reason="stopped before two rounds were measured",
                           round_ratios=rounds_of.ratios[p], sessions=rounds_of.sessions[p])
            else:
                times = rounds_of.times[p]
                row.update(status="ok", a_s=sorted(times["a"])[len(times["a"]) // 2],
                           b_s=sorted(times["b"])[len(times["b"]) // 2], ratio=est.ratio, low=est.low,
                           high=est.high, rounds=est.rounds, round_ratios=rounds_of.ratios[p],
                           sessions=rounds_of.sessions[p], round_faults=rounds_of.faults[p],
                           round_others_cpu_share=rounds_of.others[p])
                if kind == "c2":
                    row.update(fraction_of_gemm(rounds_of, p, est, self.flops[key(pa)], self.flops[key(pb)]))
                else:
                    row.update(in_memory_states(rounds_of, p, est))
            rows.append(row)
        workers = self.workers
        plain = [workers[w] for w in workers if self.worker_env[w] == self.env] or list(workers.values())
        return rows, self.rounds, self.seconds, self.stopped, plain[0].regime if plain else None


def c2_rounds(rounds_of: PairRounds, kinds: list[str], rounds: int) -> int:
    """Rounds after ``rounds`` for C2's pairs alone (the others settled), up to C2_ROUNDS; the rounds measured."""
    c2 = {p for p, kind in enumerate(kinds) if kind == "c2" and p not in rounds_of.skipped}
    if not c2:
        return rounds
    rounds_of.settled |= set(range(len(kinds))) - c2
    while rounds < C2_ROUNDS:
        rounds_of.round(rounds)
        rounds += 1
    return rounds


def matmul_flops(case: tuple[str, dict, str]) -> int:
    """The matmul FLOPs of one call of a case (built here once: the FLOP model reads its sizes)."""
    area, params, method = case
    return cases.build(area, params).work(method)[1].matmul_total


def label(row: dict) -> str:
    return f"{row['kind']}: " + ", ".join(f"{k}={v}" for k, v in row["params"].items() if k != "device")


def show(rows: list[dict]) -> str:
    lines = [f"{'pair':<52} {'a med.':>10} {'b med.':>10} {'b/a':>7} {'95% interval':>15}  rounds",
             f"{'':<52} {'(per call)':>10} {'(per call)':>10} {'(round':>7} {'(a rerun)':>15}",
             f"{'':<52} {'':>10} {'':>10} {'ratios)':>7}"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"{label(r)[:52]:<52} skipped: {r['reason']}")
            continue
        lines.append(f"{label(r)[:52]:<52} {r['a_s'] * 1e3:>8.2f}ms {r['b_s'] * 1e3:>8.2f}ms {r['ratio']:>7.3f} "
                     f"{r['low']:>7.3f}-{r['high']:<7.3f}  {r['rounds']}" + notes(r))
    return "\n".join(lines)


def notes(row: dict) -> str:
    """What a pair's ratio comes with: '  (55% of the GEMM's rate, 50-60%)' for a c2 pair, with both memory states
    where it ran in two; for another pair that ran in two, '  (two memory states: 2 sessions at 4.40, counted; 1
    session at 2.16)', or for one whose sessions drew one of the states earlier runs kept, that
    (``kept_states.said``); and the rounds timed on a busy machine (``mirrored.busy``); else ''."""
    def states(figure) -> str:
        return "two memory states: " + "; ".join(
            f"{m['sessions']} session{'s' * (m['sessions'] != 1)} at {figure(m)}" + (", counted" if m.get("counted")
                                                                                     else "")
            for m in row["modes"])
    parts = []
    if "fraction" in row:
        parts.append(f"{row['fraction']:.0%} of the GEMM's rate, {row['fraction_low']:.0%}-{row['fraction_high']:.0%}")
    if row.get("modes"):
        parts.append(states(lambda m: format(m["fraction"], ".0%")) if "fraction" in row
                     else states(lambda m: format(m["ratio"], ".2f")))
    if row.get("earlier_states"):
        parts.append(kept_states.said(row["earlier_states"]))
    if said := busy(row.get("round_others_cpu_share")):
        parts.append(said)
    return f"  ({'; '.join(parts)})" if parts else ""


def kept_pairs(record: str, kinds: list[str], grid: str, device: str) -> list[dict]:
    """The pairs of the record already at ``record`` that a new measurement of ``kinds`` keeps: those of other
    kinds, when it is of the same commit, grid and device (a record of other code or conditions is
    replaced whole, and that is said). ValueError naming the file when something there is not a pairs
    record: only a command's own record is replaced."""
    if not os.path.lexists(record):
        return []
    try:
        earlier = read_json(record)
    except (UnreadableRecord, OSError) as error:
        raise ValueError(f"--record {record!r} holds something that is not a pairs record ({error}); only a pairs "
                         "record is replaced: move it or give another --record") from None
    why = pairs_problem(earlier)
    if why:
        raise ValueError(f"--record {record!r} is not a pairs record ({why}); only a pairs record is replaced: move "
                         "it or give another --record")
    same = (earlier.get("commit"), earlier.get("grid"), earlier.get("device")) == (commit(), grid, device)
    others = [p for p in earlier["pairs"] if p.get("kind") not in kinds]
    if others and not same:
        print(f"note: {record} held pairs of commit {short(earlier.get('commit'))}, grid {earlier.get('grid')!r}, "
              f"{earlier.get('device')}: replaced whole", file=sys.stderr)
    return others if same else []


def check_run_folder(out: str) -> None:
    """ValueError when ``out`` is a run folder of another commit: its pairs would be shown as that run's."""
    meta = os.path.join(out, "machine.json")
    if not os.path.exists(meta):
        return
    try:
        theirs = read_json(meta).get("commit")
    except UnreadableRecord as error:
        raise ValueError(f"--out {out!r}: {error}") from None
    if theirs != commit():
        raise ValueError(f"--out {out!r} holds a run of commit {short(theirs)}, and this code is "
                         f"{short(commit())}: its report would show these pairs as that run's. Give this "
                         "commit's run folder, or --record FILE to keep the pairs apart")


def measure(kinds: list[str], grid: str, device: str, budget: float, record: str, progress: bool = True,
            env: dict | None = None, chosen: list[tuple[str, dict]] | None = None,
            sessions: Sessions | None = None) -> dict:
    """Time every pair of ``kinds`` (of the ``chosen`` cases only, where given: a run's) and write the record (kind
    ``pairs``) atomically at ``record`` (``save``); ``env``: more environment for the worker (``FIXED_ALLOCATOR``;
    default none: the allocator the grid runs with); ``sessions``: those already begun (``Sessions.one``), whose
    rest this times."""
    print(f"Timing the pairs of {', '.join(kinds)} on grid {grid!r} ({device}) in mirrored blocks of about "
          f"{BLOCK_S * 1e3:g} ms, until every interval is within ±{PRECISION:.0%} or {budget:g} s", file=sys.stderr)
    sessions = sessions or Sessions(kinds, grid, device, env, chosen)
    sessions.rest(budget, progress)
    saved = save(sessions, kinds, grid, device, budget, record)
    if sessions.stopped is not None:
        raise sessions.stopped  # after the record of what was measured is saved
    return saved


def save(sessions: Sessions, kinds: list[str], grid: str, device: str, budget: float, record: str,
         partial: str | None = None) -> dict:
    """The record of what ``sessions`` timed so far, written atomically at ``record``, keeping the pairs of other
    kinds it held at this commit (``kept_pairs``); ``partial``: why more sessions are to come (the main job's,
    between the grid's rounds), said as the record's ``stopped`` until they are timed."""
    kept = kept_pairs(record, kinds, grid, device)
    rows, rounds, seconds, stopped, regime = sessions.result()
    rows = kept_states.attach(machine.metadata(), rows, os.path.realpath(record))
    return envelope.save(record, "pairs", commit(), regime=regime, grid=grid, device=device, rounds=rounds,
                         elapsed_s=seconds, budget_s=budget, precision=PRECISION, block_s=BLOCK_S,
                         threads=torch.get_num_threads(), worker_env=sessions.env, pairs=kept + rows,
                         session_started_at=sessions.rounds_of.session_started_at,
                         stopped=partial if stopped is None else (str(stopped) or "interrupted"))


def check(kinds: list[str], grid: str, device: str, out: str | None, record: str | None) -> str:
    """Everything checked before a pair is timed (ValueError naming the bad value); the record's path:
    ``record``, else in the run folder ``out``, else ``results/pairs/<host>-<grid>-<device>.json``."""
    record = record or (os.path.join(out, RECORD.format(device=device)) if out else os.path.join(
        "results", "pairs", f"{machine.metadata().get('hostname', 'host')}-{grid}-{device}.json"))
    guards.check_devices([device])
    if not any(pairs_of(kind, grid, device) for kind in kinds):
        raise ValueError(f"no pair of {kinds} on grid {grid!r} for device {device!r}")
    if out:
        guards.writable_folder(out, "--out")
        check_run_folder(out)
    guards.writable_folder(os.path.dirname(os.path.abspath(record)), "--record's folder")
    guards.writable_file(record, "--record")
    kept_pairs(record, kinds, grid, device)
    return record
