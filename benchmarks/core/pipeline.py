"""One run, as every measuring command does it: plan the grid, check the folders, measure (spread over
torchrun's ranks where there are several), summarise. ``attention-bench run`` measures through
``measure_grid``; ``attention-bench ranks`` shares the run folder's rules (``run_folder``, ``one_machine``,
``hold``, ``one_run``).
"""

from __future__ import annotations

import argparse
import errno
import glob
import os
import shutil
import socket
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import cases
from . import guards
from .ranks.world import Ranks
from .records import UnreadableRecord, read_json, short
from .running.lock import FolderBusy, FolderLock
from .running.runner import Runner, plan

#: seconds of timing per method (per measurement for the head-parallel cases), unless --min-run-time says
MIN_RUN_TIME = 0.2
#: rounds per method, each in a fresh process: a case's figure is the median over ROUNDS processes, its interval
#: where a rerun's median lands (what one process happens to get moves a time by a few per cent, or 2x, for the
#: process; ``benchmarks.core.timing.rerun``)
ROUNDS = 3
ROUNDS_HELP = (f"time each method in R rounds (default {ROUNDS}), each round a pass over the whole grid in a fresh "
               "process, splitting --min-run-time between them: the time is their median, its interval where a "
               "rerun's median lands (95%%)")


def machine_name(args: argparse.Namespace) -> str:
    return args.machine or socket.gethostname()


def run_folder(args: argparse.Namespace, kind: str | None = None) -> str:
    """``--out``, or ``results/runs/<machine>-<kind, default the grid>``."""
    return args.out or os.path.join("results", "runs", f"{machine_name(args)}-{kind or args.grid}")


@dataclass
class GridRun:
    """A planned run: the cases, the folder, the runner and this process's rank."""

    todo: list[tuple[str, dict]]
    out: str
    runner: Runner
    ranks: Ranks
    lock: FolderLock | None  # held by rank 0 for the whole command

    @property
    def share(self) -> list[tuple[str, dict]]:
        return self.ranks.share(self.todo)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def stopped(self, error: BaseException) -> int:
        """A run stopped by Ctrl-C (exit code 130) or a full disk (2): say so in one line, with the summary
        so far and how to go on; any other error is raised again."""
        if isinstance(error, KeyboardInterrupt):
            said, code = "interrupted: every record written so far is whole (each is written as soon as its case " \
                         "ends); run the same command again to resume.", 130
        elif isinstance(error, OSError) and error.errno in DISK_FULL:
            said, code = f"error: could not write in {self.out} ({error.strerror}): every record written before " \
                         "is whole; free some space and run the same command again to resume.", 2
        else:
            raise error
        print(said + "\n" + self.runner.summary(self.runner.counts), file=sys.stderr)
        return code


#: the errors of a full disk (no space; quota exceeded)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
#: bytes a method's record takes at most (one round; about 4 KB on the default grid), and each further round
RECORD_BYTES, ROUND_BYTES = 8192, 1024


def space_needed(todo: list[tuple[str, dict]], rounds: int) -> int:
    """Bytes a run of ``todo`` may write into its folder: every method's record, and machine.json."""
    methods = sum(len(cases.METHODS[area]) for area, _ in todo)
    return methods * (RECORD_BYTES + (rounds - 1) * ROUND_BYTES) + RECORD_BYTES


def plan_run(args: argparse.Namespace, areas: Iterable[str] | None = None, extra: tuple[int, str] = (0, "")
             ) -> GridRun:
    """Everything checked before anything is measured (ValueError naming the bad value): the grid and its
    areas and devices, the run folder and the free space on its disk (the records, and ``extra``: (bytes,
    what for) that the command writes there too), the timing options; under torchrun, this rank joins
    the group."""
    todo = plan(args.grid, areas, getattr(args, "device", None), getattr(args, "param", ()))
    out = guards.writable_folder(run_folder(args), "--out")
    rounds = getattr(args, "rounds", 1)
    guards.check_free_space(out, space_needed(todo, rounds) + extra[0],
                            "--out", f"{len(todo)} cases' records in {rounds} round{'s' * (rounds != 1)}{extra[1]}")
    one_machine(out, machine_name(args))
    # each round in a fresh process, except under torchrun, whose ranks are the processes
    runner = Runner(out, min_run_time=args.min_run_time, name=machine_name(args), rounds=getattr(args, "rounds", 1),
                    quick_constants=args.grid == "quick", fresh=int(os.environ.get("WORLD_SIZE", 1)) == 1,
                    recalibrate=getattr(args, "recalibrate", False), grid=args.grid)
    ranks = Ranks()
    try:
        lock = hold(out, ranks.rank, ranks.all_agree)
    except FolderBusy:
        ranks.close()
        raise
    if ranks.rank == 0:
        one_run(out, runner.commit, runner.rounds)
    return GridRun(todo, out, runner, ranks, lock)


def one_machine(out: str, name: str) -> None:
    """A run folder holds one machine's run: ValueError when ``out`` already holds another machine's (its
    machine.json names it), so that a resumed run never files one machine's times under another's name."""
    path = os.path.join(out, "machine.json")
    try:
        saved = read_json(path).get("name") if os.path.exists(path) else None
    except UnreadableRecord:  # the runner sets it aside and calibrates again
        return
    if saved and saved != name:
        raise ValueError(f"{out} holds a run of machine {saved!r}, not {name!r}: one machine per run folder. Pass "
                         f"--machine {saved} to resume it, or another --out for {name!r}")


def one_run(out: str, commit: str | None, rounds: int = 1) -> str | None:
    """Keep ``out`` one commit's run at one rounds count: records of another commit or rounds count (and the
    other commit's machine.json and profiles) move to ``<out>/earlier/<commit>-<R>r/``, itself a run folder
    that ``reports build`` reads, never overwritten and never counted as this run's. Returns the one line
    that says so (printed on stderr), or None when nothing moved. Call it holding the folder's lock."""
    named: dict[tuple, str] = {}

    def dest(c, r):  # a folder of its own for each (commit, rounds), -2, -3, ... beside an earlier one
        if (c, r) not in named:
            stem = os.path.join(out, "earlier", f"{short(c) if c else 'no-commit'}-{r}r")
            folder, n = stem, 1
            while os.path.exists(folder):
                n += 1
                folder = f"{stem}-{n}"
            named[(c, r)] = folder
        return named[(c, r)]

    groups: Counter = Counter()
    for path in sorted(glob.glob(os.path.join(glob.escape(out), "cases", "*.json"))):
        try:
            rec = read_json(path)
        except UnreadableRecord:
            continue  # the runner sets it aside, naming it
        key = (rec.get("commit"), rec.get("rounds_planned", 1))
        if key != (commit, rounds):
            os.makedirs(os.path.join(dest(*key), "cases"), exist_ok=True)
            os.replace(path, os.path.join(dest(*key), "cases", os.path.basename(path)))
            groups[key] += 1
    meta = os.path.join(out, "machine.json")
    try:
        saved = read_json(meta).get("commit", commit) if os.path.exists(meta) else commit
    except UnreadableRecord:
        saved = commit
    for c, r in groups:  # each earlier run keeps its machine's facts and peaks
        if c == saved and os.path.exists(meta):
            shutil.copy2(meta, os.path.join(dest(c, r), "machine.json"))
    if saved != commit:
        home = next((dest(c, r) for c, r in groups if c == saved), dest(saved, 1))
        os.makedirs(home, exist_ok=True)
        os.replace(meta, os.path.join(home, "machine.json"))
        os.makedirs(os.path.join(home, "profiles"), exist_ok=True)
        for profile in glob.glob(os.path.join(glob.escape(out), "profiles", "*")):
            shutil.move(profile, os.path.join(home, "profiles", os.path.basename(profile)))
    if not groups and saved == commit:
        return None
    told = "; ".join([f"{n} record{'s' * (n != 1)} of commit {short(c)} in {r} round{'s' * (r != 1)} to {dest(c, r)}"
                      for (c, r), n in groups.items()] + ([] if saved == commit else
                                                          [f"machine.json of commit {short(saved)} to {home}"]))
    line = (f"note: {out} holds one run (commit {short(commit)}, {rounds} round{'s' * (rounds != 1)}); moved "
            f"{told}")
    print(line, file=sys.stderr)
    return line


def hold(out: str, rank: int, all_agree: Callable[[bool], bool]) -> FolderLock | None:
    """Rank 0 takes the run folder's lock (``core.lock``); every rank learns whether it got it (``all_agree``:
    True when every rank says True), so that a busy folder stops them all with FolderBusy before anything is
    measured. Returns the lock on rank 0, None on the others."""
    lock, busy = (FolderLock(out), None) if rank == 0 else (None, None)
    if lock is not None:
        try:
            lock.acquire()
        except FolderBusy as error:
            busy = error
    if not all_agree(busy is None):
        raise busy or FolderBusy(f"{out} is being written by another process (rank 0 names it)")
    return lock


def measure_grid(run: GridRun, progress: bool = True, between=None) -> tuple[dict[str, int], dict[str, int]]:
    """Measure this rank's share of the grid (rank 0 calibrates first, the others read its peaks), print the
    run summary on stderr and return (this rank's counts, every rank's counts summed). A rank stopped
    under torchrun ends with one line (``ranks.RankGuard``). ``between``: as ``Runner.run``'s."""
    ranks = run.ranks
    with ranks.guard(run.out, lambda: run.runner.current):
        ranks.calibrate_first(run.runner, run.todo)
        counts = run.runner.run(run.share, progress=progress and ranks.rank == 0, between=between)
        print(("" if ranks.world == 1 else f"rank {ranks.rank} of {ranks.world}: ") + run.runner.summary(counts),
              file=sys.stderr)
        total = ranks.total(counts)  # every rank has finished measuring
    ranks.close()
    return counts, total
