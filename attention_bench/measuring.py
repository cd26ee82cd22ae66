"""The commands that measure: run (the main job), pairs, gate, profile and ranks (under torchrun). Each parses its
flags (``options``), calls the library and prints the result; the measuring lives in ``benchmarks``."""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks import cases, distributed, gate, history, pairs
from benchmarks.core import guards, pipeline
from benchmarks.core.hardware import machine
from benchmarks.core.profiling import profiler
from benchmarks.core.running import runner

from . import options

#: bytes a report (page, figures, CSV; about 4 MB of the default grid) and the profiles and their traces
#: (about 2 MB) may take at most
REPORT_BYTES, PROFILE_BYTES = 16 * 2**20, 16 * 2**20
#: seconds per device the main job spends timing the verdicts' ratios paired (a session after each of the grid's
#: rounds, then more after the profiles): the three sessions a ratio needs at least (``pairs.MIN_ROUNDS``) take
#: about 45 s on two cores, so it buys no fourth
PAIRS_BUDGET_S = 30.0
#: the profile set (benchmarks.cases.PROFILE_SETS) measured after each grid
PROFILE_SET_FOR_GRID = {"quick": "quick", "default": "default", "full": "default"}


# -- run: the main job ------------------------------------------------------------------------------

def add_run(p: argparse.ArgumentParser) -> None:
    options.add(p, "--grid", "--area", "--param", "--device", "--out", "--machine", "--rounds", "--min-run-time",
                "--recalibrate", "--report")
    p.add_argument("--no-profile", action="store_true", help="profile no case")
    p.add_argument("--pairs-budget", type=guards.seconds_or_none, default=PAIRS_BUDGET_S, metavar="SECONDS",
                   help="seconds of paired rounds per device for the verdicts' ratios, a session after each of "
                   "the grid's rounds and more after the profiles, three sessions at least (as attention-bench "
                   f"pairs --budget; default {PAIRS_BUDGET_S:g}, 0: none)")
    p.add_argument("--no-report", action="store_true", help="measure only: the run folder holds the results, and "
                   "attention-bench report builds the report from it later")


def run(args: argparse.Namespace) -> int:
    """Measure the grid into the run folder (resumable; under torchrun, this rank's share), profile, time the
    pairs, write the report and print its path."""
    from reports import html, publish  # here, not at the top: the round processes import this module too

    stages = Stages()
    report = not args.no_report
    if report:
        html.check_replaceable(args.report, [pipeline.run_folder(args)])
        guards.writable_folder(args.report, "--report")
        guards.check_free_space(args.report, 2 * REPORT_BYTES, "--report", "the report, built beside the old one")
    # under torchrun: this rank's share of the grid; rank 0 profiles and reports
    run = pipeline.plan_run(args, args.area, extra=(0, "") if args.no_profile else (PROFILE_BYTES, " and the profiles"))
    ranks, out = run.ranks, run.out
    print(f"Measuring the {args.grid!r} grid ({len(run.todo)} cases) into {out}"
          + (f", rank {ranks.rank} of {ranks.world}: {len(run.share)} cases" if ranks.world > 1 else ""),
          file=sys.stderr)
    try:
        # the verdicts' ratios: a session after each of the grid's rounds, spread over the run as they are (not
        # under torchrun, whose ranks measure the grid without rounds of their own), the rest after the profiles
        paired = Paired(args, out, run.todo) if args.pairs_budget and ranks.rank == 0 else None
        _, total = pipeline.measure_grid(run, progress=not args.no_progress,
                                         between=paired.one if paired and ranks.world == 1 else None)
        stages.done("grid", {"pairs": paired.seconds} if paired else None)
        if ranks.rank != 0:
            return 0
        if ranks.world > 1:
            print(f"all {ranks.world} ranks: " + ", ".join(f"{k} {v}" for k, v in total.items()))
        # the grid's profile set, within the cases chosen (--area, --param, --device)
        chosen = [c for c in cases.profile_set(PROFILE_SET_FOR_GRID[args.grid]) if (c[0], c[1]) in run.todo]
        if not args.no_profile and chosen:
            # in a process of its own: the calibration set torch's threads in this one
            profiled = profiler.run_set_fresh(chosen, out, progress=not args.no_progress)
            print("profiled: " + ", ".join(f"{k} {v}" for k, v in sorted(profiled.items())), file=sys.stderr)
            stages.done("profiles")
        if paired:
            paired.rest()
            stages.done("pairs")
    except (KeyboardInterrupt, OSError) as error:
        return run.stopped(error)
    finally:
        run.release()
    if not report:
        print(f"Measured in {stages}", file=sys.stderr)
        print(os.path.abspath(out))
        return 0
    index = publish.build([out], args.report)
    stages.done("report")
    print(f"Report written in {stages}:", file=sys.stderr)
    print(os.path.abspath(index))
    return 0


class Stages:
    """The main job's stages and the seconds each took, for its last line: "300 s (grid 200 s, ...)"."""

    def __init__(self):
        self.start = self.last = time.time()
        self.seconds: dict[str, float] = {}

    def done(self, stage: str, within: dict[str, float] | None = None) -> None:
        """``stage`` ends now; ``within``: the seconds of other stages timed inside it (the pairs' sessions
        between the grid's rounds), counted as theirs."""
        now = time.time()
        self.seconds[stage], self.last = self.seconds.get(stage, 0.0) + now - self.last, now
        for other, seconds in (within or {}).items():
            self.seconds[stage] -= seconds
            self.seconds[other] = self.seconds.get(other, 0.0) + seconds

    def __str__(self) -> str:
        return f"{self.last - self.start:.0f} s (" + ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items()) + ")"


class Paired:
    """The verdicts' ratios of the run's cases (``todo``: its --area, --param and --device), timed paired
    (``benchmarks.pairs``) into the run folder for each device measured, session by session: ``one`` after each of
    the grid's rounds, its record written as it ends (a run stopped then keeps them), ``rest`` after the profiles
    (``pairs.measure``'s rounds, within --pairs-budget). A worker that dies is said, and the report goes on without
    that device's pairs."""

    def __init__(self, args, out: str, todo: list[tuple[str, dict]]):
        self.grid, self.budget, self.progress, self.seconds = args.grid, args.pairs_budget, not args.no_progress, 0.0
        keys, self.sessions = pairs.chosen_keys(todo), {}
        for device in sorted({p.get("device", "cpu") for _, p in todo} & set(machine.local_devices())):
            kinds = [k for k in pairs.KINDS
                     if any(pairs.within(pair, keys) for pair in pairs.pairs_of(k, args.grid, device))]
            if kinds:
                record = os.path.join(out, pairs.RECORD.format(device=device))
                self.sessions[device] = kinds, record, pairs.Sessions(kinds, args.grid, device, chosen=todo)

    def one(self) -> None:
        started = time.monotonic()
        for device, (kinds, record, sessions) in list(self.sessions.items()):
            print(f"Timing session {sessions.rounds + 1} of the pairs of {', '.join(kinds)} ({device})",
                  file=sys.stderr)
            try:
                try:
                    sessions.one()
                finally:  # what was timed is kept, a Ctrl-C's too
                    pairs.save(sessions, kinds, self.grid, device, self.budget, record,
                               None if sessions.stopped else "more sessions after the grid's rounds")
            except (pairs.WorkerDied, ValueError) as error:
                self._died(device, error)
        self.seconds += time.monotonic() - started

    def rest(self) -> None:
        for device, (kinds, record, sessions) in list(self.sessions.items()):
            try:
                pairs.measure(kinds, self.grid, device, self.budget, record, self.progress, sessions=sessions)
            except (pairs.WorkerDied, ValueError) as error:
                self._died(device, error)

    def _died(self, device: str, error: Exception) -> None:
        print(f"warning: the paired ratios on {device} stopped: {error}; the report has none", file=sys.stderr)
        self.sessions.pop(device, None)


# -- pairs ------------------------------------------------------------------------------------------

def add_pairs(p: argparse.ArgumentParser) -> None:
    options.add(p, "--grid", "--device", "--budget", "--out", "--record")
    p.add_argument("--kind", action="append", choices=list(pairs.KINDS),
                   help="only the pairs of this kind (repeatable; default: every kind)")
    p.add_argument("--fixed-allocator", action="store_true",
                   help="run the worker with glibc's allocator fixed, as the gate does (no page faults on large "
                   "tensors), instead of the users' default allocator, which the grid runs with")


def time_pairs(args: argparse.Namespace) -> int:
    """Each verdict's ratio timed in mirrored blocks, per device; the record goes in --out's run folder (where
    the report reads it), at --record, or under results/pairs/."""
    kinds = args.kind or list(pairs.KINDS)
    devices = args.device or machine.local_devices()
    if args.record and len(devices) > 1:
        raise ValueError(f"--record {args.record!r} holds one device's pairs: give one --device (asked: "
                         f"{', '.join(devices)})")
    records = {d: pairs.check(kinds, args.grid, d, args.out, args.record) for d in devices}
    for device, record in records.items():
        try:
            saved = pairs.measure(kinds, args.grid, device, args.budget, record, not args.no_progress,
                                  pairs.FIXED_ALLOCATOR if args.fixed_allocator else None)
        except (pairs.WorkerDied, KeyboardInterrupt) as error:
            print(pairs.show([p for p in pairs.read_json(record)["pairs"] if p["kind"] in kinds]))
            print(("interrupted" if isinstance(error, KeyboardInterrupt) else f"error: {error}")
                  + f"; the ratios measured so far are saved in {os.path.abspath(record)}", file=sys.stderr)
            return 130 if isinstance(error, KeyboardInterrupt) else 2
        print(pairs.show([p for p in saved["pairs"] if p["kind"] in kinds]))
        print(f"{saved['rounds']} rounds in {saved['elapsed_s']:.0f} s; record: {os.path.abspath(record)}",
              file=sys.stderr)
    return 0


# -- gate -------------------------------------------------------------------------------------------

def add_gate(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", help="the commit to compare against (a branch, tag or hash)")
    p.add_argument("head", nargs="?", default=gate.TREE,
                   help=f"the commit under test (default: {gate.TREE}, the working tree)")
    options.add(p, "--grid", "--area", "--method", "--param", "--device", "--budget", "--record", "--threshold")


def compare_commits(args: argparse.Namespace) -> int:
    """HEAD against BASE case by case in the same moments; exit code 1 when a case is slower than the threshold
    with confidence. The record defaults to results/gate/<base>-<head>.json."""
    base, head, record = gate.check(args.base, args.head, args.threshold, args.record)
    todo = gate.selection(args.grid, args.area, args.device or machine.local_devices(), args.method, args.param)
    rows, stopped = gate.compare(base, head, todo, args.threshold, args.budget, record, not args.no_progress)
    if isinstance(stopped, gate.WorkerDied):
        print(f"error: {stopped}", file=sys.stderr)
    if any(r["verdict"] == "slower" for r in rows):
        return 1
    if isinstance(stopped, KeyboardInterrupt):
        return 130
    return 2 if stopped is not None or all(r["verdict"] == "skipped" for r in rows) else 0


# -- history ----------------------------------------------------------------------------------------

def add_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("range", nargs="?", help="the commits, asv's way: A..B (after A, up to B, oldest first) or one "
                   "commit")
    p.add_argument("--commits", metavar="FILE", help="the commits listed in a file, one per line, instead of a range")
    p.add_argument("--reference", help="the commit every other is timed against (default: the history's first)")
    options.add(p, "--grid", "--area", "--method", "--param", "--device", "--budget", "--threshold")
    p.add_argument("--total-budget", type=guards.seconds, default=3600.0, metavar="SECONDS",
                   help="seconds of timing for the whole history at most (default 3600); run again to go on")
    p.add_argument("--history", metavar="FOLDER", help="where each commit's record goes (default "
                   f"{history.HISTORIES}/<reference>-<grid>; a history resumes in it)")


def track_history(args: argparse.Namespace) -> int:
    """Every commit of a range timed paired against one reference commit, case by case (the gate's measurement);
    exit code 1 when a step is found: a case whose ratio moved from one commit to the next beyond the threshold,
    with the two intervals apart."""
    if not 0 < args.threshold < 1:
        raise ValueError(f"--threshold {args.threshold!r}: give a fraction between 0 and 1, e.g. 0.05 for 5%")
    commits = history.commits(args.range, args.commits)
    reference = history.check(commits, args.reference)
    todo = gate.selection(args.grid, args.area, args.device or machine.local_devices(), args.method, args.param)
    folder = guards.writable_folder(args.history or os.path.join(history.HISTORIES, f"{reference[:8]}-{args.grid}"),
                                    "--history")
    print(f"{len(commits)} commits against {reference[:8]}, {len(todo)} cases each, into {folder}", file=sys.stderr)
    records = history.measure(commits, reference, todo, args.threshold, args.budget, args.total_budget, folder,
                              not args.no_progress)
    found = history.steps(records, args.threshold)
    print(history.show(records, found))
    return 1 if found else 0


# -- profile ----------------------------------------------------------------------------------------

def add_profile(p: argparse.ArgumentParser) -> None:
    options.add(p, "--grid", "--area", "--method", "--param", "--device", "--out", "--machine")
    p.add_argument("--set", choices=list(cases.PROFILE_SETS), help="a named set of cases instead of a selection")
    p.add_argument("--cycles", type=guards.count, default=None, help="profiled calls per case, each after an "
                   "unprofiled one (default: as many as fit in 4 s at the case's speed, 2 to 5)")


def profile(args: argparse.Namespace) -> int:
    """Where the time goes, per component, for a named set or the grid's cases that --area/--method/--param
    select; each case's record and trace go to <out>/profiles/<case>/, where the report reads them."""
    out = guards.writable_folder(pipeline.run_folder(args), "--out")
    if args.set is not None:
        if args.area or args.method or args.param or args.device:
            raise ValueError(f"--set {args.set!r} names its cases: give it alone, or select with --area, --method, "
                             "--param and --device")
        todo = cases.profile_set(args.set)
    elif not args.area:
        raise ValueError("give --set NAME, or --area AREA (with --param AXIS=VALUE to narrow it)")
    else:
        todo = runner.plan_methods(args.grid, args.area, args.device, args.param, args.method)
        if not todo:
            raise ValueError(f"no case to profile: areas {args.area} have none of the methods {args.method}")
    counts = profiler.run_set(todo if args.set is None else args.set, out, cycles=args.cycles,
                              progress=not args.no_progress)
    for record in profiler.load(out):
        if any(record["area"] == a and record["params"] == p and record["method"] == m for a, p, m in todo):
            print(summary(record) + "\n")
    print(f"{os.path.join(out, 'profiles')}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
          file=sys.stderr)
    return 2 if counts.get("failed") or counts.get("oom") else 0


def summary(r: dict) -> str:
    """A profile's breakdown as text: one line per component."""
    lines = [f"{r['area']} {r['method']} {r['params']} on {r['device']} ({r['threads'] or '-'} threads)",
             f"unprofiled {r['unprofiled_s'] * 1e3:.3g} ms, profiled {r['profiled_s'] * 1e3:.3g} ms "
             f"(profiler overhead {r['overhead']:+.0%}); components sum to {r['sum_over_unprofiled']:.2f}x the "
             f"unprofiled call; matmul FLOPs equal the analytic model per component: {r['flops_match_analytic']}; "
             f"sequential depth {r['sequential_depth']}, {r['op_launches']} launches; peak memory "
             f"{r['peak_bytes'] / 2**20:.1f} MiB",
             f"{'component':28s} {'time ms':>9s} {'share':>6s} {'calls':>6s} {'launch':>6s} {'GFLOP':>9s} "
             f"{'GFLOP/s':>8s}"]
    for c in r["components"]:
        rate = c["achieved_flops_per_s"]
        lines.append(f"{c['component']:28s} {c['time_s'] * 1e3:9.3f} {c['share']:6.1%} {c['calls']:6d} "
                     f"{c['launches']:6d} {c['analytic_matmul_flops'] / 1e9:9.3f} "
                     f"{'' if rate is None else f'{rate / 1e9:8.1f}'}")
    return "\n".join(lines)


# -- ranks: head-parallel attention under torchrun ---------------------------------------------------

def add_ranks(p: argparse.ArgumentParser) -> None:
    options.add(p, "--grid", "--out", "--machine", "--min-run-time")
    p.add_argument("--backend", choices=["gloo", "nccl"], help="gloo (CPU, the default without a GPU) or nccl (GPU)")


def ranks(args: argparse.Namespace) -> int:
    """Head-parallel attention over this torchrun group's ranks into one run folder for every rank count
    (default results/runs/<machine>-parallel)."""
    return distributed.run(args)


COMMANDS = {
    "run": ("measure a grid, profile, time the pairs and write the report: the main job", add_run, run),
    "pairs": ("time each verdict's ratio paired, in mirrored blocks", add_pairs, time_pairs),
    "gate": ("is HEAD slower than BASE? both timed in the same moments, case by case", add_gate, compare_commits),
    "history": ("a range of commits, each timed paired against one reference: the steps in it", add_history,
                track_history),
    "profile": ("where the time goes, per component in the paper's terms", add_profile, profile),
    "ranks": ("head-parallel attention over torchrun's ranks (torchrun ... -m attention_bench ranks)", add_ranks,
              ranks),
}
