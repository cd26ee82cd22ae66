"""The regression gate: is HEAD slower than BASE? Both timed in the same moments, case by case.

    python -m benchmarks.gate main                      the working tree against main
    python -m benchmarks.gate BASE HEAD --area attention --threshold 0.05 --budget 180

Each side's ``transformer`` (a commit's, from ``git archive``, or the working tree's) runs in a worker
process of its own, with this checkout's case definitions (``benchmarks.cases``) for both; one controller
alternates them in mirrored blocks (A B B A, then B A A B) over short rounds until every case is decided or
the time budget is spent (``benchmarks.core.paired``). Prints one row per case (base time, head time, the
ratio head/base with its 95% interval, the verdict) and saves the comparison as a record
(``results/gate/<base>-<head>.json``; ``python -m reports measured`` renders it).

Exit codes: 0 no case slower; 1 a case slower than the threshold with confidence; 2 bad input (an
unknown commit, one without the models, nothing to compare or every selected case skipped, uncommitted case
definitions, a worker that died or stopped answering); 130 interrupted (Ctrl-C). Whatever stops it, the
verdicts reached so far are printed and saved.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tarfile
import tempfile
import time

import torch

from . import cases
from .core import guards, machine
from .core.paired import (
    FIXED_ALLOCATOR,
    HANDOVER_S,
    SESSION_ROUNDS,
    VERDICTS,
    MirroredRounds,
    Side,
    Worker,
    WorkerDied,
)
from .core.records import case_key, check_record_path, write_json_atomic
from .core.runner import plan

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


def check_sides(base: str, head: str) -> None:
    """ValueError when there is nothing to compare (the same models on both sides) or when the case
    definitions both sides are timed with have uncommitted changes (the comparison could not be redone)."""
    if git("status", "--porcelain", "--", "benchmarks"):
        raise ValueError("the gate times both sides with this checkout's case definitions (benchmarks/), which have "
                         "uncommitted changes: commit or stash them, so that the comparison can be redone")
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


def run(gate: Gate, threshold: float, budget: float, progress: bool) -> tuple[int, bool]:
    """Rounds until every case is decided (after MIN_ROUNDS) or the budget is spent: (rounds, decided)."""

    def decided(estimates) -> bool:
        return all(e.verdict(threshold) != "inconclusive" for e in estimates if e is not None)

    def say(r, estimates, seconds):
        verdicts = [e.verdict(threshold) for e in estimates if e is not None]
        print(f"\rround {r}: " + ", ".join(f"{verdicts.count(v)} {v}" for v in VERDICTS if verdicts.count(v))
              + f" ({seconds:.0f} s of {budget:g})", end="", file=sys.stderr, flush=True)

    rounds = gate.run(decided, budget, MIN_ROUNDS, MAX_ROUNDS, say if progress else None)
    if progress:
        print(file=sys.stderr)
    return rounds, decided(gate.estimates())


def table(gate: Gate, threshold: float) -> list[dict]:
    rows = []
    for i, ((area, params, method), est) in enumerate(zip(gate.todo, gate.estimates())):
        median = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
        row = {"area": area, "method": method, "params": params, "case": case_key(area, method, params),
               "base_s": median(gate.times[i]["a"]), "head_s": median(gate.times[i]["b"])}
        if est is None:
            row.update(verdict="skipped", reason=gate.skipped[i])
        else:
            row.update(ratio=est.ratio, low=est.low, high=est.high, rounds=est.rounds, verdict=est.verdict(threshold),
                       round_ratios=gate.ratios[i], sessions=gate.sessions[i])
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
                     f"{r['low']:>7.3f}-{r['high']:<7.3f}  {r['verdict']}")
    return "\n".join(lines)


def selection(grid: str, areas, devices, methods, params: list[str]) -> list[tuple[str, dict, str]]:
    """The cases to compare; ValueError naming a ``--param`` that is not AXIS=VALUE, an axis the chosen areas
    do not have or a value the grid does not give it (each with what is allowed)."""
    planned = plan(grid, areas, devices)
    wanted = {}
    for pair in params:
        axis, eq, value = pair.partition("=")
        if not eq or not axis:
            raise ValueError(f"--param {pair!r}: give AXIS=VALUE, e.g. backend=sdpa")
        axes = sorted({a for _, p in planned for a in p})
        if axis not in axes:
            raise ValueError(f"--param {pair!r}: no axis {axis!r} in the chosen cases of grid {grid!r}; "
                             f"allowed: {', '.join(axes)}")
        values = sorted({str(p[axis]) for _, p in planned if axis in p})
        if value not in values:
            raise ValueError(f"--param {pair!r}: {axis} is never {value!r} on grid {grid!r}; allowed: "
                             f"{', '.join(values)}")
        wanted[axis] = value
    todo = [(area, p, method) for area, p in planned for method in cases.METHODS[area]
            if method != "graph" and (not methods or method in methods)
            and all(str(p.get(axis)) == value for axis, value in wanted.items())]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit to compare against (a branch, tag or hash)")
    parser.add_argument("head", nargs="?", default=TREE,
                        help=f"the commit under test (default: {TREE}, the working tree)")
    parser.add_argument("--grid", default="quick", choices=list(cases.GRIDS), help="grid whose cases are compared")
    parser.add_argument("--area", action="append", help="restrict to an area (repeatable)")
    parser.add_argument("--method", action="append", help="restrict to a method, e.g. forward (repeatable)")
    parser.add_argument("--device", action="append", choices=["cpu", "cuda"],
                        help="restrict to a device (default: every device this machine has)")
    parser.add_argument("--param", action="append", default=[], metavar="AXIS=VALUE",
                        help="restrict to cases with this axis value, e.g. backend=sdpa (repeatable)")
    parser.add_argument("--threshold", type=float, default=0.05, help="the slowdown that fails the gate (default 0.05)")
    parser.add_argument("--budget", type=guards.seconds, default=165.0,
                        help="seconds of rounds at most (default 165: with its start, the gate ends within 3 minutes)")
    parser.add_argument("--record", help="where to save the comparison (default results/gate/<base>-<head>.json)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        if not 0 < args.threshold < 1:
            raise ValueError(f"--threshold {args.threshold!r}: give a fraction between 0 and 1, e.g. 0.05 for 5%")
        base = resolve(args.base)
        head = TREE if args.head == TREE else resolve(args.head)
        for side in (base, head):
            if side != TREE:
                check_models(side)
        check_sides(base, head)
        devices = args.device or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        todo = selection(args.grid, args.area, devices, args.method, args.param)
        record = args.record or os.path.join("results", "gate", f"{base[:8]}-{head[:8]}.json")
        guards.writable_folder(os.path.dirname(os.path.abspath(record)), "--record's folder")
        guards.writable_file(record, "--record")
        check_record_path(record, "gate")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gate-") as tmp:
        base_models = export(base, os.path.join(tmp, "base"))
        head_models = ROOT if head == TREE else export(head, os.path.join(tmp, "head"))
        gate = Gate(todo, Worker("base", base_models, ROOT, FIXED_ALLOCATOR),
                    Worker("head", head_models, ROOT, FIXED_ALLOCATOR))
        started = time.monotonic()
        print(f"Comparing {len(todo)} cases: head {head if head == TREE else head[:8]} against base {base[:8]}, "
              f"mirrored blocks of about {BLOCK_S * 1e3:g} ms, until decided or {args.budget:g} s", file=sys.stderr)
        stopped: BaseException | None = None
        try:
            gate.start()
            rounds, decided = run(gate, args.threshold, args.budget, not args.no_progress)
        except (WorkerDied, KeyboardInterrupt) as error:  # what was decided so far is kept and said
            stopped, rounds, decided = error, gate.measured_rounds(), False
        finally:
            gate.stop()
    rows = table(gate, args.threshold)
    facts = machine.metadata()
    print(show(rows))
    slower = [r for r in rows if r["verdict"] == "slower"]
    compared = [r for r in rows if r["verdict"] != "skipped"]
    elapsed = time.monotonic() - started
    if isinstance(stopped, KeyboardInterrupt):
        end = "interrupted"
    elif stopped is not None:
        end = "stopped early: a worker died or stopped answering (below)"
    elif decided:
        end = "every case decided"
    else:
        end = (f"stopped at the {args.budget:g} s budget with {sum(r['verdict'] == 'inconclusive' for r in rows)} "
               "cases inconclusive")
    print(f"{rounds} rounds in {elapsed:.0f} s; {end}; {len(slower)} slower than {args.threshold:.0%}"
          + ("" if compared else "; nothing was compared: every selected case was skipped, which is not a pass"),
          file=sys.stderr)
    if isinstance(stopped, WorkerDied):
        print(f"error: {stopped}", file=sys.stderr)
    write_json_atomic(record, {"kind": "gate", "base": base, "head": head, "threshold": args.threshold,
                               "rounds": rounds, "decided": decided, "budget_s": args.budget, "elapsed_s": elapsed,
                               "block_s": BLOCK_S, "date": dt.datetime.now(dt.timezone.utc).isoformat(),
                               "machine": {k: facts.get(k) for k in ("cpu_model", "cpu_count", "torch", "gpu_name")},
                               "threads": torch.get_num_threads(), "worker_env": FIXED_ALLOCATOR,
                               "handover_s": HANDOVER_S,
                               "regime": gate.base.regime,
                               "stopped": None if stopped is None else (str(stopped) or "interrupted"),
                               "cases": rows})
    print(f"record: {os.path.abspath(record)}", file=sys.stderr)
    if slower:
        return 1
    if isinstance(stopped, KeyboardInterrupt):
        return 130
    return 2 if stopped is not None or not compared else 0


if __name__ == "__main__":
    sys.exit(main())
