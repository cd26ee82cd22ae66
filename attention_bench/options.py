"""The flags the commands and the measurement scripts share, each defined once: one meaning, one default and one
check wherever a command takes it (a test walks every command's and script's parser and holds that)."""

from __future__ import annotations

import argparse
import os

from benchmarks import cases
from benchmarks.core import guards, pipeline
from benchmarks.core.hardware import constants_cache

#: the report's folder, unless --report says
REPORT_DIR = os.path.join("results", "report")
#: seconds of paired rounds at most per device (gate, pairs): with its start, a gate ends within 3 minutes
BUDGET_S = 165.0

OPTIONS: dict[str, dict] = {
    "--grid": dict(default="default", choices=list(cases.GRIDS),
                   help="the grid whose cases the command takes (default: default)"),
    "--area": dict(action="append", choices=list(cases.GRIDS["full"]),
                   help="only this area's cases (repeatable; default: every area of the grid)"),
    "--method": dict(action="append", choices=sorted({m for ms in cases.METHODS.values() for m in ms}),
                     help="only this method, e.g. forward (repeatable; default: every method of the area)"),
    "--param": dict(action="append", default=[], metavar="AXIS=VALUE",
                    help="only the cases with this axis value, e.g. backend=sdpa (repeatable)"),
    "--device": dict(action="append", choices=["cpu", "cuda"],
                     help="only this device (repeatable; default: every device this machine has)"),
    "--out": dict(metavar="FOLDER", help="the run folder: the command's results go in it and the report reads them "
                  "from it (default results/runs/<machine>-<grid>; a run resumes in it)"),
    "--report": dict(metavar="FOLDER", default=REPORT_DIR, help=f"the report's folder (default {REPORT_DIR})"),
    "--record": dict(metavar="FILE", help="save the result as a JSON record at FILE, as docs/measured keeps them "
                     "(attention-bench measured FILE renders it)"),
    "--csv": dict(metavar="FILE", help="write the table as CSV to FILE"),
    "--machine": dict(type=guards.label, help="this machine's label in the records, the reports and the run "
                      "folder's name (default: the hostname)"),
    "--rounds": dict(type=guards.rounds, default=pipeline.ROUNDS, metavar="R", help=pipeline.ROUNDS_HELP),
    "--min-run-time": dict(type=guards.seconds, default=pipeline.MIN_RUN_TIME, metavar="SECONDS",
                           help=f"seconds of timing per method (default {pipeline.MIN_RUN_TIME:g})"),
    "--recalibrate": dict(action="store_true", help="measure the performance model's constants again, also at the "
                          "strong-scaling cases' other thread counts (default: this machine's cached ones, if measured "
                          f"within {constants_cache.MAX_AGE_DAYS} days with the same software and threads, and "
                          "measured only at the thread count the other cases use)"),
    "--budget": dict(type=guards.seconds, default=BUDGET_S, metavar="SECONDS",
                     help=f"seconds of paired rounds at most, per device, after the workers' first start and "
                     f"build (default {BUDGET_S:g})"),
    "--threshold": dict(type=float, default=0.05, metavar="FRACTION",
                        help="the change that counts, as a fraction (default 0.05): a slowdown this large fails the "
                        "gate; a move this large between two commits is a step in a history"),
    "--threads": dict(type=guards.count, metavar="N", help="torch's CPU threads for the cases without a thread "
                      "count of their own (default: torch's own count, left alone)"),
    "--mirrored-rounds": dict(type=guards.count, default=12, metavar="R",
                              help="rounds of mirrored blocks (a b b a, then b a a b) per process (default 12)"),
    "--seq-len": dict(type=guards.count, default=128, metavar="N",
                      help="the models' source and target length (default 128)"),
    "--no-progress": dict(action="store_true", help="no progress bar"),
    "--quiet": dict(action="store_true", help="results and errors only: no progress bar, notes or warnings"),
}


def add(parser: argparse.ArgumentParser, *flags: str) -> None:
    """Give ``parser`` these shared flags, as OPTIONS defines them."""
    for flag in flags:
        parser.add_argument(flag, **OPTIONS[flag])

