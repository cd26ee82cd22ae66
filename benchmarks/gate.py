"""The regression gate: is HEAD slower than BASE? Both timed in the same moments, case by case.

    attention-bench gate main                      the working tree against main
    attention-bench gate BASE HEAD --area attention --threshold 0.05 --budget 180

Each side's ``transformer`` (a commit's, from ``git archive``, or the working tree's) runs in a worker
process of its own, with this checkout's case definitions (``benchmarks.cases``) for both; one controller
alternates them in mirrored blocks (A B B A, then B A A B) over short rounds until every case is decided or
the time budget is spent (``benchmarks.core.pairing.mirrored``). Prints one row per case (base time, head time, the
ratio head/base with its 95% interval, the verdict) and saves the comparison as a record
(``results/gate/<base>-<head>.json``; ``attention-bench measured`` renders it).

Exit codes: 0 no case slower; 1 a case slower than the threshold with confidence; 2 bad input (an
unknown commit, one without the models, nothing to compare or every selected case skipped, uncommitted case
definitions, a worker that died or stopped answering); 130 interrupted (Ctrl-C). Whatever stops it, the
verdicts reached so far are printed and saved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import time

import torch

from .core import envelope, guards
from .core.pairing.mirrored import (
    FIXED_ALLOCATOR,
    HANDOVER_S,
    SESSION_ROUNDS,
    VERDICTS,
    MirroredRounds,
    Side,
    busy,
)
from .core.pairing.workers import Worker, WorkerDied
from .core.records import case_key, check_record_path
from .core.running.runner import plan_methods

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the working tree, as HEAD
TREE = "tree"
#: seconds each block of calls lasts (at least one call), rounds at least and at most per comparison
BLOCK_S, MAX_ROUNDS = 0.03, 300
#: rounds before a verdict: three sessions (pairs of worker processes)
MIN_ROUNDS = 3 * SESSION_ROUNDS


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        said = done.stderr.strip().splitlines()
        raise ValueError(f"git {' '.join(args)}: {said[-1] if said else f'exit code {done.returncode}'}")
    return done.stdout.strip()


def resolve(commit: str) -> str:
    try:
        return git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    except ValueError:
        raise ValueError(f"unknown commit {commit!r}: give a commit, branch or tag of {ROOT}") from None


def check_cases_committed() -> None:
    """ValueError when the case definitions both sides are timed with (this checkout's ``benchmarks/``) have
    uncommitted changes: the comparison could not be redone."""
    if git("status", "--porcelain", "--", "benchmarks"):
        raise ValueError("the gate times both sides with this checkout's case definitions (benchmarks/), which have "
                         "uncommitted changes: commit or stash them, so that the comparison can be redone")


def check_sides(base: str, head: str) -> None:
    """ValueError when there is nothing to compare (the same models on both sides) or when the case
    definitions have uncommitted changes (``check_cases_committed``)."""
    check_cases_committed()
    if head == TREE:
        same = not git("status", "--porcelain", "--", "transformer") and not git("diff", "--name-only", base, "--",
                                                                                  "transformer")
    else:
        same = git("rev-parse", f"{base}:transformer") == git("rev-parse", f"{head}:transformer")
    if same:
        raise ValueError(f"base {base[:8]} and head {head if head == TREE else head[:8]} have the same models "
                         "(transformer/): nothing to compare")


def export(commit: str, into: str) -> str:
    """The commit's ``transformer`` package unpacked under ``into``; the folder that holds it."""
    os.makedirs(into, exist_ok=True)
    archive = os.path.join(into, "models.tar")
    with open(archive, "wb") as f:
        subprocess.run(["git", "archive", commit, "transformer"], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


class Gate(MirroredRounds):
    """One comparison: each case in the base worker against the same case in the head worker."""

    def __init__(self, todo: list[tuple[str, dict, str]], base: Worker, head: Worker):
        super().__init__([base, head], todo, [(Side(base, i), Side(head, i)) for i in range(len(todo))], BLOCK_S,
                         HANDOVER_S)
        self.base, self.head = base, head


def run(gate: Gate, threshold: float, budget: float, progress: bool, precision: float | None = None
        ) -> tuple[int, bool]:
    """Rounds until every case is decided (after MIN_ROUNDS) or the budget is spent: (rounds, decided). Decided:
    a verdict against ``threshold``; with ``precision``, an interval no wider than that (high / low - 1), which a
    history needs to tell one commit's ratio from the next's, whatever the verdict: a case that has it is not
    timed again, and the rounds go to the cases still wider."""

    def precise(e) -> bool:
        return e.high / e.low - 1 <= precision

    def decided(estimates) -> bool:
        if precision is not None:
            return all(precise(e) for e in estimates if e is not None)
        return all(e.verdict(threshold) != "inconclusive" for e in estimates if e is not None)

    def say(r, estimates, seconds):
        verdicts = [e.verdict(threshold) for e in estimates if e is not None]
        print(f"\rround {r}: " + ", ".join(f"{verdicts.count(v)} {v}" for v in VERDICTS if verdicts.count(v))
              + f" ({seconds:.0f} s of {budget:g})", end="", file=sys.stderr, flush=True)

    rounds = gate.run(decided, budget, MIN_ROUNDS, MAX_ROUNDS, say if progress else None,
                      settled=None if precision is None else precise)
    if progress:
        print(file=sys.stderr)
    return rounds, decided(gate.estimates())


def table(gate: Gate, threshold: float) -> list[dict]:
    rows = []
    for i, ((area, params, method), est) in enumerate(zip(gate.todo, gate.estimates(), strict=True)):
        median = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
        row = {"area": area, "method": method, "params": params, "case": case_key(area, method, params),
               "base_s": median(gate.times[i]["a"]), "head_s": median(gate.times[i]["b"])}
        if est is None:
            row.update(verdict="skipped", reason=gate.skipped[i])
        else:
            row.update(ratio=est.ratio, low=est.low, high=est.high, rounds=est.rounds, verdict=est.verdict(threshold),
                       round_ratios=gate.ratios[i], sessions=gate.sessions[i],
                       round_others_cpu_share=gate.others[i])
        rows.append(row)
    return rows


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.3f}ms"


def show(rows: list[dict]) -> str:
    """The table printed: each side's median block time per call, and the ratio as the gate estimates it
    (the trimmed mean of the rounds' ratios, not the ratio of the two medians) with its 95% interval."""
    lines = [f"{'case':<70} {'base med.':>10} {'head med.':>10} {'ratio':>7} {'95% interval':>15}  verdict",
             f"{'':<70} {'(per call)':>10} {'(per call)':>10} {'(round':>7} {'(bootstrap)':>15}",
             f"{'':<70} {'':>10} {'':>10} {'ratios)':>7}"]
    for r in rows:
        if r["verdict"] == "skipped":
            lines.append(f"{r['case'][:70]:<70} {'':>10} {'':>10} {'':>7} {'':>15}  skipped: {r['reason']}")
            continue
        lines.append(f"{r['case'][:70]:<70} {_ms(r['base_s']):>10} {_ms(r['head_s']):>10} {r['ratio']:>7.3f} "
                     f"{r['low']:>7.3f}-{r['high']:<7.3f}  {r['verdict']}"
                     + (f" ({busy(r.get('round_others_cpu_share'))})" if busy(r.get("round_others_cpu_share")) else ""))
    return "\n".join(lines)


def selection(grid: str, areas, devices, methods, params: list[str]) -> list[tuple[str, dict, str]]:
    """The cases to compare; ValueError naming a ``--param`` that is not AXIS=VALUE, an axis the chosen areas
    do not have or a value the grid does not give it (each with what is allowed)."""
    todo = plan_methods(grid, areas, devices, params, methods or None)
    if not todo:
        raise ValueError(f"no case to compare: no case of the chosen areas has --method {methods} and --param {params}")
    return todo


def check_models(commit: str) -> None:
    """ValueError when ``commit`` has no ``transformer/`` (a commit from before the models, say)."""
    try:
        git("rev-parse", "--verify", "--quiet", f"{commit}:transformer")
    except ValueError:
        raise ValueError(f"commit {commit[:8]} has no transformer/ folder: it cannot build the cases; give a "
                         "commit that has the models") from None


def check(base: str, head: str, threshold: float, record: str | None) -> tuple[str, str, str]:
    """The commits resolved and the record's path, checked before anything is timed (ValueError naming the
    bad value): (base, head, record)."""
    if not 0 < threshold < 1:
        raise ValueError(f"--threshold {threshold!r}: give a fraction between 0 and 1, e.g. 0.05 for 5%")
    base = resolve(base)
    head = TREE if head == TREE else resolve(head)
    for side in (base, head):
        if side != TREE:
            check_models(side)
    check_sides(base, head)
    record = record or os.path.join("results", "gate", f"{base[:8]}-{head[:8]}.json")
    guards.writable_folder(os.path.dirname(os.path.abspath(record)), "--record's folder")
    guards.writable_file(record, "--record")
    check_record_path(record, "gate")
    return base, head, record


def ending(stopped: BaseException | None, decided: bool, rows: list[dict], budget: float,
           precision: float | None = None) -> str:
    """How a comparison ended, in words: interrupted, a worker lost, decided, or the budget spent (with how many
    cases are inconclusive or, timing to a precision, wider than it)."""
    if isinstance(stopped, KeyboardInterrupt):
        return "interrupted"
    if stopped is not None:
        return "stopped early: a worker died or stopped answering (below)"
    if decided:
        return "every case decided" if precision is None else f"every interval within {precision:.0%}"
    if precision is not None:
        wide = sum(r.get("high") is not None and r["high"] / r["low"] - 1 > precision for r in rows)
        return f"stopped at the {budget:g} s budget with {wide} cases' intervals wider than {precision:.0%}"
    return (f"stopped at the {budget:g} s budget with {sum(r['verdict'] == 'inconclusive' for r in rows)} cases "
            "inconclusive")


def compare(base: str, head: str, todo: list[tuple[str, dict, str]], threshold: float, budget: float, record: str,
            progress: bool = True, precision: float | None = None) -> tuple[list[dict], BaseException | None]:
    """Time ``todo`` on both sides until every case is decided (``run``: a verdict, or with ``precision`` an
    interval that narrow) or ``budget`` seconds are spent; print one row per case, save the record (kind
    ``gate``) atomically at ``record`` whatever stopped it, and return the rows and what stopped it early (a dead
    worker, Ctrl-C) or None."""
    with tempfile.TemporaryDirectory(prefix="gate-") as tmp:
        base_models = export(base, os.path.join(tmp, "base"))
        head_models = ROOT if head == TREE else export(head, os.path.join(tmp, "head"))
        gate = Gate(todo, Worker("base", base_models, ROOT, FIXED_ALLOCATOR),
                    Worker("head", head_models, ROOT, FIXED_ALLOCATOR))
        started = time.monotonic()
        print(f"Comparing {len(todo)} cases: head {head if head == TREE else head[:8]} against base {base[:8]}, "
              f"mirrored blocks of about {BLOCK_S * 1e3:g} ms, until decided or {budget:g} s", file=sys.stderr)
        stopped: BaseException | None = None
        try:
            gate.start()
            rounds, decided = run(gate, threshold, budget, progress, precision)
        except (WorkerDied, KeyboardInterrupt) as error:  # what was decided so far is kept and said
            stopped, rounds, decided = error, gate.measured_rounds(), False
        finally:
            gate.stop()
    rows = table(gate, threshold)
    print(show(rows))
    elapsed = time.monotonic() - started
    end = ending(stopped, decided, rows, budget, precision)
    slower = sum(r["verdict"] == "slower" for r in rows)
    print(f"{rounds} rounds in {elapsed:.0f} s; {end}; {slower} slower than {threshold:.0%}"
          + ("" if any(r["verdict"] != "skipped" for r in rows)
             else "; nothing was compared: every selected case was skipped, which is not a pass"), file=sys.stderr)
    envelope.save(record, "gate", head, regime=gate.base.regime, base=base, head=head, threshold=threshold,
                  rounds=rounds, decided=decided, budget_s=budget, elapsed_s=elapsed, block_s=BLOCK_S,
                  threads=torch.get_num_threads(), worker_env=FIXED_ALLOCATOR, handover_s=HANDOVER_S,
                  stopped=None if stopped is None else (str(stopped) or "interrupted"), cases=rows)
    print(f"record: {os.path.abspath(record)}", file=sys.stderr)
    return rows, stopped
