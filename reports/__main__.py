"""attention-bench's command line: measure the default grid and write the report, or report on results.

    python -m reports                      measure the default grid on this machine (CPU; GPU too if
                                           there is one), then write the report and print its path
    python -m reports build PATH [PATH...] report on results already measured: runner folders
                                           (results/runs/<name>) and/or asv's .asv/results
    python -m reports compare PATH PATH... print the machines side by side (and write the report)
    python -m reports csv PATH... --out F  export the tidy table as CSV
    python -m reports claims               the claims the suite tests (docs/CLAIMS.md)
    python -m reports measured F.json      a README block generated from a saved record (report.json, ...)
    python -m reports history              asv publish, with the site's libraries served locally (offline)
    python -m reports reproduce RUN RUN... one machine's runs: each answer's figure per run, with its interval,
                                           and the figures that fall outside another run's
    python -m reports predict SHEET        what another machine would do: a run's cases priced with a
                                           datasheet (docs/machines/*.json) or a run's measured constants
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import pandas as pd
import torch

from benchmarks import cases, pairs
from benchmarks.core import guards, pipeline, profiler, records

from . import claims, columns, history, html, measured, predict, ranges, reproduce, tidy
from .analyses import noise
from .analyses.hardware import analyse_hardware
from .analyses.runs import latest_run, one_machine_per_run
from .html import MISSING, displayable

REPORT_DIR = os.path.join("results", "report")
#: bytes a report (page, figures, CSV; about 4 MB of the default grid) and the profiles and their traces
#: (about 2 MB) may take at most
REPORT_BYTES, PROFILE_BYTES = 16 * 2**20, 16 * 2**20
#: seconds per device the main job spends timing the verdicts' ratios paired, after the grid and the profiles
PAIRS_BUDGET_S = 45.0
#: the profile set (benchmarks.cases.PROFILE_SETS) measured after each grid
PROFILE_SET_FOR_GRID = {"quick": "quick", "default": "default", "full": "default"}


def _asv_html(paths: list[str]) -> str | None:
    """asv's published site next to the results, as a path relative to the report (if it exists)."""
    for candidate in [os.path.join(os.path.dirname(os.path.abspath(p)), "html", "index.html") for p in paths] + [
            os.path.abspath(os.path.join(".asv", "html", "index.html"))]:
        if os.path.exists(candidate):
            return candidate
    return None


def _report(paths: list[str], out: str, machine: str | None = None, table=None, extra: dict | None = None) -> str:
    """Build the report of ``paths`` into ``out``. Refuses to build one with no measured case, and says so
    when it replaces a report that was there. ``extra``: more fields for its ``report.json``."""
    table = tidy.load(paths) if table is None else table
    timed = table[table.metric.isin(["time", "sequential_depth"])]
    for status, reason in timed[timed.status.isin(tidy.NOT_COUNTED)][["status", "reason"]].itertuples(index=False):
        print(f"warning: {status} record, not counted: {reason}", file=sys.stderr)
    if not (timed.status == "ok").any():
        why = "; ".join(f"{n} {s}: {r}" for (s, r), n in timed.groupby(["status", "reason"]).size().items())
        raise ValueError(f"no case was measured ({why or 'no case records'}), so no report was written"
                         + (f"; the report in {out!r} was left as it is"
                            if os.path.exists(os.path.join(out, "index.html")) else ""))
    html.check_replaceable(out, paths)
    guards.writable_folder(out, "--report")
    previous = html.describe(out)
    site = _asv_html(paths)
    lead = machine or next(iter(dict.fromkeys(table.machine.dropna())), None)
    lead_run = latest_run(table[table.machine == lead])
    folders = [p for p in tidy.unique_paths(paths) if os.path.normpath(p) == lead_run]
    # a relative link keeps working when the report and .asv/html move together
    try:
        sensitivity = measured.latest_sensitivity()
        gate = None if sensitivity is None else (f"{sensitivity[0]}: {measured.sensitivity_caption(sensitivity[1])}",
                                                 measured.sensitivity_table(sensitivity[1]))
        index = html.build(table, out, machine=machine, asv_html=os.path.relpath(site, out) if site else None,
                           gate=gate,
                           profiles=tidy.load_profiles(folders, lead), pairs=tidy.load_pairs(folders, lead),
                           inputs=tidy.unique_paths(paths), extra=extra)
    except OSError as error:  # a full disk, say: html.build leaves the old report whole and nothing partial
        raise ValueError(f"could not write the report into {out!r} ({error.strerror or error}); "
                         + ("the report that was there is left as it was" if previous else "no report was written")
                         + ", and nothing partial remains") from None
    if previous:
        print(f"note: replaced the report in {out} ({previous}); pass --report DIR to keep reports apart",
              file=sys.stderr)
    return index


def measure(args) -> int:
    start = time.time()
    try:
        html.check_replaceable(args.report, [pipeline.run_folder(args)])
        guards.writable_folder(args.report, "--report")
        guards.check_free_space(args.report, 2 * REPORT_BYTES, "--report", "the report, built beside the old one")
        # under torchrun: this rank's share of the grid; rank 0 profiles and reports
        run = pipeline.plan_run(args, extra=(0, "") if args.no_profile else (PROFILE_BYTES, " and the profiles"))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    ranks, out = run.ranks, run.out
    print(f"Measuring the {args.grid!r} grid ({len(run.todo)} cases) into {out}"
          + (f", rank {ranks.rank} of {ranks.world}: {len(run.share)} cases" if ranks.world > 1 else ""),
          file=sys.stderr)
    try:
        pipeline.measure_grid(run, progress=not args.no_progress)
        if ranks.rank != 0:
            return 0
        if not args.no_profile:
            profiled = profiler.run_set(PROFILE_SET_FOR_GRID[args.grid], out, progress=not args.no_progress)
            print("profiled: " + ", ".join(f"{k} {v}" for k, v in sorted(profiled.items())), file=sys.stderr)
        if args.pairs_budget:
            _time_pairs(args, out, {p.get("device", "cpu") for _, p in run.todo} & _local_devices())
    except (KeyboardInterrupt, OSError) as error:
        return run.stopped(error)
    finally:
        run.release()
    index = _report([out], args.report)
    print(f"Report written in {time.time() - start:.0f} s:", file=sys.stderr)
    print(os.path.abspath(index))
    return 0


def _local_devices() -> set[str]:
    return {"cpu"} | ({"cuda"} if torch.cuda.is_available() else set())


def _time_pairs(args, out: str, devices: set[str]) -> None:
    """The verdicts' ratios timed paired (``benchmarks.pairs``) into the run folder, for each device measured;
    a worker that dies is said, and the report goes on without that device's pairs."""
    for device in sorted(devices):
        kinds = [k for k in pairs.KINDS if pairs.pairs_of(k, args.grid, device)]
        if not kinds:
            continue
        try:
            pairs.measure(kinds, args.grid, device, args.pairs_budget,
                          os.path.join(out, pairs.RECORD.format(device=device)), progress=not args.no_progress)
        except (pairs.WorkerDied, ValueError) as error:
            print(f"warning: the paired ratios on {device} stopped: {error}; the report has none", file=sys.stderr)


def build(args) -> int:
    html.check_replaceable(args.report, args.paths)
    index = _report(args.paths, args.report, args.machine)
    print(os.path.abspath(index))
    return 0


def _print_agreement(found: list[dict]) -> None:
    """How far each run's times are from its predecessor's on the same machine, raw and normalised by the
    interleaved control GEMM (``noise.agreements``)."""
    for a in found:
        agree = pd.DataFrame(a["rows"]).set_index("metric")
        print(f"\n{a['machine']}: {a['second']} against {a['first']}{noise.rounds_told(a)}, |second/first - 1| "
              "over the cases both timed "
              f"(>= {noise.MIN_TIME_S * 1e3:g} ms):\n{displayable(agree).to_string(na_rep=MISSING)}")


def _print_differences(folders: list[str]) -> None:
    """Each run folder after the first against the first, figure by figure: differs, or the same within the
    noise (``reproduce.differences``: each run's stated interval, or ±5% where it states none)."""
    if len(folders) < 2:
        return
    runs = [reproduce.figures(f) for f in folders]
    for other in runs[1:]:
        d = reproduce.differences(runs[0], other)
        if d.empty:
            continue
        print(f"\n{other['run']} ({other['machine']}) against {runs[0]['run']} ({runs[0]['machine']}), figure by "
              f"figure: {int((d.verdict == 'differs').sum())} of {len(d)} differ, the rest are the same within the "
              f"noise (each run's interval, or ±{reproduce.TOLERANCE:.0%} where it states none):")
        with pd.option_context("display.max_rows", None, "display.width", 250, "display.max_colwidth", 60):
            print(displayable(d.sort_values("verdict")).to_string(index=False, na_rep=MISSING,
                                                                  float_format=lambda v: f"{v:.4g}"))


def compare(args) -> int:
    html.check_replaceable(args.report, args.paths)
    table = tidy.load(args.paths)
    runs = table.run.nunique()
    if runs < 2:
        raise ValueError(f"compare needs two runs or more; {' and '.join(map(repr, args.paths))} hold"
                         f" {runs}. To report on one run: python -m reports build PATH")
    found = noise.agreements(table)
    _print_agreement(found)
    table = one_machine_per_run(table)  # two runs of one machine are compared, not reduced to one
    a = ranges.check(analyse_hardware(table))
    print(a.verdict)

    for name, df in a.tables.items():
        print(f"\n{name}:\n{displayable(df).to_string(na_rep=MISSING)}")
    _print_differences([p for p in tidy.unique_paths(args.paths) if os.path.isfile(os.path.join(p, "machine.json"))])
    print(os.path.abspath(_report(args.paths, args.report, table=table, extra={"agreement": found})))
    return 0


def print_reproducibility(args) -> int:
    if args.record:
        records.check_record_path(args.record, "reproducibility")
    runs = [reproduce.figures(path) for path in args.paths]
    t = reproduce.table(runs)
    print(reproduce.show(runs, t))
    if args.record:
        measured.save(args.record, "reproducibility", runs[0]["commit"],
                      runs=[{k: r[k] for k in ("run", "machine", "cpu", "commit")} for r in runs],
                      summary=reproduce.summary(t), figures=t.to_dict(orient="records"))
    return 0


def print_claims(args) -> int:
    print(claims.markdown(), end="")
    return 0


def print_measured(args) -> int:
    if args.update:
        for page in args.update:
            print(f"{page}: {measured.refresh(page)} generated blocks, each from its record")
        return 0
    if args.record is None:
        raise ValueError("give a record (docs/measured/<name>.json) or --update PAGE")
    only = args.only.split(",") if args.only else None
    print(measured.markdown(measured.load(args.record), args.record, only, getattr(args, "for")), end="")
    return 0


def csv(args) -> int:
    guards.writable_file(args.out, "--out")
    columns.check_csv_path(args.out, columns.COLUMNS[:2])
    columns.write_csv(tidy.load(args.paths), args.out)
    print(os.path.abspath(args.out))
    return 0


def publish_history(args) -> int:
    try:
        site = history.publish(args.config)
    except history.PublishFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(os.path.abspath(site))
    print("open it with `asv preview` (a web server on localhost); it needs no internet")
    return 0


def print_prediction(args) -> int:
    if not os.path.isdir(args.run):
        raise FileNotFoundError(f"--run {args.run!r}: no such run folder; measure one first (python -m reports) "
                                "or name one")
    if args.record:
        records.check_record_path(args.record, "prediction")
    text, fields = predict.main(args.sheet, args.run, args.csv, args.dtype)
    print(text)
    if args.record:
        commit = records.read_json(os.path.join(args.run, "machine.json")).get("commit")
        measured.save(args.record, "prediction", commit, dtype=args.dtype, **fields)
    return 0


def main(argv: list[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--report", default=REPORT_DIR, help=f"report folder (default {REPORT_DIR})")
    measuring = argparse.ArgumentParser(add_help=False)
    pipeline.add_run_options(measuring, cases.GRIDS, default_grid="default")
    measuring.add_argument("--device", action="append", choices=["cpu", "cuda"], help="only this device (repeatable)")
    measuring.add_argument("--no-profile", action="store_true", help="measure only: profile no case")
    measuring.add_argument("--pairs-budget", type=guards.seconds_or_none, default=PAIRS_BUDGET_S, metavar="SECONDS",
                           help="seconds per device for timing the verdicts' ratios paired after the grid "
                           f"(python -m benchmarks.pairs; default {PAIRS_BUDGET_S:g}, 0: none)")
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__.split("\n\n")[0],
                                     parents=[common, measuring], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n")[1])
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("measure", parents=[common, measuring], help="measure a grid, then write the report (default)")
    b = sub.add_parser("build", parents=[common], help="report on results already measured")
    b.add_argument("paths", nargs="+")
    b.add_argument("--machine", help="the machine whose per-machine analyses lead the report")
    c = sub.add_parser("compare", parents=[common], help="compare machines' results")
    c.add_argument("paths", nargs="+")
    sub.add_parser("claims", help="print the claims the suite tests (docs/CLAIMS.md)")
    m = sub.add_parser("measured", help="a README block generated from a saved record (report.json or a script's)")
    m.add_argument("record", nargs="?", help="a report's report.json or a script's --record, kept under docs/measured/")
    m.add_argument("--update", nargs="+", metavar="PAGE",
                   help="rewrite every generated block of these pages (README.md, docs/MEASURED.md) from its record")
    m.add_argument("--only", help="comma-separated keys of the report's analyses to quote (default: all); answers: "
                   "its answers table")
    m.add_argument("--for", default=measured.README, metavar="PAGE",
                   help=f"the page the block goes in, its links relative to it (default {measured.README})")
    e = sub.add_parser("csv", help="export the tidy table")
    e.add_argument("paths", nargs="+")
    e.add_argument("--out", required=True)
    h = sub.add_parser("history", help="asv publish, with the JavaScript its site loads served from the site")
    h.add_argument("--config", default="asv.conf.json", help="asv's configuration (default asv.conf.json)")
    r = sub.add_parser("reproduce", help="one machine's runs side by side: each answer's figure per run, its interval, "
                       "and the figures outside another run's")
    r.add_argument("paths", nargs="+", help="two or more run folders of one machine")
    r.add_argument("--record", help="save the table as a record (docs/measured/; python -m reports measured)")
    p = sub.add_parser("predict", help="a run's cases predicted on another machine (a datasheet or measured constants)")
    p.add_argument("sheet", help="a datasheet (docs/machines/*.json) or a run folder / machine.json with constants")
    p.add_argument("--run", default=os.path.join("results", "runs", f"{socket.gethostname()}-default"),
                   help="the run whose cases are priced (default results/runs/<hostname>-default, the main job's)")
    p.add_argument("--dtype", default="float32", help="the datasheet's peak for this dtype (default float32)")
    p.add_argument("--csv", help="also write the table (every row labelled predicted) to this CSV")
    p.add_argument("--record", help="save the verdicts as a record (docs/measured/; python -m reports measured)")
    args = parser.parse_args(argv)
    try:
        return {None: measure, "measure": measure, "build": build, "compare": compare, "csv": csv,
                "claims": print_claims, "measured": print_measured, "history": publish_history,
                "predict": print_prediction, "reproduce": print_reproducibility}[args.command](args)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
