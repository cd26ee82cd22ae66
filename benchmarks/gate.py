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
unknown commit, nothing to compare, uncommitted case definitions, a worker that died).
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
    SESSION_ROUNDS,
    VERDICTS,
    WORKER_ENV,
    MirroredRounds,
    Side,
    Worker,
    WorkerDied,
)
from .core.records import case_key, write_json_atomic
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
        super().__init__([base, head], todo, [(Side(base, i), Side(head, i)) for i in range(len(todo))], BLOCK_S)
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


def show(rows: list[dict]) -> str:
    lines = [f"{'case':<70} {'base':>10} {'head':>10} {'ratio':>7} {'95% interval':>15}  verdict"]
    for r in rows:
        if r["verdict"] == "skipped":
            lines.append(f"{r['case'][:70]:<70} {'':>10} {'':>10} {'':>7} {'':>15}  skipped: {r['reason']}")
            continue
        lines.append(f"{r['case'][:70]:<70} {r['base_s'] * 1e3:>8.3f}ms {r['head_s'] * 1e3:>8.3f}ms {r['ratio']:>7.3f} "
                     f"{r['low']:>7.3f}-{r['high']:<7.3f}  {r['verdict']}")
    return "\n".join(lines)


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
        check_sides(base, head)
        wanted = dict(pair.partition("=")[::2] for pair in args.param)
        devices = args.device or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        todo = [(area, params, method) for area, params in plan(args.grid, args.area, devices)
                for method in cases.METHODS[area] if method != "graph" and (not args.method or method in args.method)
                and all(str(params.get(axis)) == value for axis, value in wanted.items())]
        if not todo:
            raise ValueError(f"no case to compare: no case of the chosen areas has --method {args.method} and "
                             f"--param {args.param}")
        record = args.record or os.path.join("results", "gate", f"{base[:8]}-{head[:8]}.json")
        guards.writable_folder(os.path.dirname(os.path.abspath(record)), "--record's folder")
        guards.writable_file(record, "--record")
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
        try:
            gate.start()
            rounds, decided = run(gate, args.threshold, args.budget, not args.no_progress)
        except WorkerDied as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        finally:
            gate.stop()
    rows = table(gate, args.threshold)
    facts = machine.metadata()
    print(show(rows))
    slower = [r for r in rows if r["verdict"] == "slower"]
    elapsed = time.monotonic() - started
    print(f"{rounds} rounds in {elapsed:.0f} s; " + ("every case decided" if decided else
          f"stopped at the {args.budget:g} s budget with {sum(r['verdict'] == 'inconclusive' for r in rows)} "
          "cases inconclusive") + f"; {len(slower)} slower than {args.threshold:.0%}", file=sys.stderr)
    write_json_atomic(record, {"kind": "gate", "base": base, "head": head, "threshold": args.threshold,
                               "rounds": rounds, "decided": decided, "budget_s": args.budget, "elapsed_s": elapsed,
                               "block_s": BLOCK_S, "date": dt.datetime.now(dt.timezone.utc).isoformat(),
                               "machine": {k: facts.get(k) for k in ("cpu_model", "cpu_count", "torch", "gpu_name")},
                               "threads": torch.get_num_threads(), "worker_env": {**WORKER_ENV, **FIXED_ALLOCATOR},
                               "cases": rows})
    print(f"record: {os.path.abspath(record)}", file=sys.stderr)
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
