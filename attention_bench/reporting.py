"""The commands that report on what was measured: report, compare, reproduce, predict, csv, claims, measured and
site. Each parses its flags (``options``), calls ``reports`` and prints the result. ``reports`` (pandas,
matplotlib, Jinja2: 0.7 s) is imported by the command that runs, not here: every command's process imports this
module to build the command line, the measuring ones and the processes they spawn included."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from benchmarks import history
from benchmarks.core import guards, records
from benchmarks.core.hardware import between_runs
from benchmarks.core.timing import rerun

from . import options

RESULTS_HELP = "run folders (results/runs/<name>) and/or asv's results (.asv/results)"


# -- report, compare --------------------------------------------------------------------------------

def add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="RESULTS", help=RESULTS_HELP)
    options.add(p, "--report")
    p.add_argument("--lead", metavar="MACHINE", help="the machine whose per-machine analyses lead the report "
                   "(default: the first one measured)")


def report(args: argparse.Namespace) -> int:
    """The report on results already measured; prints its path."""
    from reports import html, publish

    html.check_replaceable(args.report, args.paths)
    print(os.path.abspath(publish.build(args.paths, args.report, args.lead)))
    return 0


def add_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="RESULTS", help="two runs or more: " + RESULTS_HELP)
    options.add(p, "--report")


def _print_agreement(found: list[dict]) -> None:
    """How far each run's times are from its predecessor's on the same machine, raw and normalised by the
    interleaved control GEMM (``noise.agreements``)."""
    import pandas as pd

    from reports.analyses import noise
    from reports.html import MISSING, displayable

    for a in found:
        agree = pd.DataFrame(a["rows"]).set_index("metric")
        print(f"\n{a['machine']}: {a['second']} against {a['first']}{noise.rounds_told(a)}, |second/first - 1| "
              "over the cases both timed "
              f"(>= {noise.MIN_TIME_S * 1e3:g} ms):\n{displayable(agree).to_string(na_rep=MISSING)}")


def _print_differences(folders: list[str]) -> None:
    """Each run folder after the first against the first, figure by figure: differs, or the same within the
    noise (``reproduce.differences``: each run's stated interval, or ±5% where it states none)."""
    import pandas as pd

    from reports import explained, reproduce
    from reports.html import MISSING, displayable

    if len(folders) < 2:
        return
    runs = [reproduce.figures(f) for f in folders]
    for folder, other in zip(folders[1:], runs[1:], strict=True):
        scaled = explained.predicted_table(folders[0], folder)
        predicted = reproduce.figures(folders[0], scaled) if scaled is not None else None
        d = reproduce.differences(runs[0], other, predicted["figures"] if predicted else None)
        if d.empty:
            continue
        print(f"\n{other['run']} ({other['machine']}) against {runs[0]['run']} ({runs[0]['machine']}), figure by "
              f"figure: {int((d.verdict == 'differs').sum())} of {len(d)} differ, the rest are the same within the "
              f"noise (each run's interval, or ±{reproduce.TOLERANCE:.0%} where it states none)"
              + ("; predicted change: the first run's cases priced with both machines' measured constants "
                 "(reports/explained.py)" if predicted else "; no predicted change: a run without measured "
                 "constants") + ":")
        with pd.option_context("display.max_rows", None, "display.width", 250, "display.max_colwidth", 60):
            print(displayable(d.sort_values("verdict")).to_string(index=False, na_rep=MISSING,
                                                                  float_format=lambda v: f"{v:.4g}"))


def compare(args: argparse.Namespace) -> int:
    """Machines (or runs of one) side by side: the agreement between runs, the hardware verdicts, figure by figure
    differs or the same within the noise; writes the report too."""
    from reports import html, publish, ranges, tidy
    from reports.analyses import hardware, noise
    from reports.analyses.runs import one_machine_per_run
    from reports.html import MISSING, displayable

    html.check_replaceable(args.report, args.paths)
    table = tidy.load(args.paths)
    runs = table.run.nunique()
    if runs < 2:
        raise ValueError(f"compare needs two runs or more; {' and '.join(map(repr, args.paths))} hold"
                         f" {runs}. To report on one run: attention-bench report PATH")
    found = noise.agreements(table)
    _print_agreement(found)
    table = one_machine_per_run(table)  # two runs of one machine are compared, not reduced to one
    a = ranges.check(hardware.analyse(table))
    print(a.verdict)
    for name, df in a.tables.items():
        print(f"\n{name}:\n{displayable(df).to_string(na_rep=MISSING)}")
    _print_differences([p for p in tidy.unique_paths(args.paths) if os.path.isfile(os.path.join(p, "machine.json"))])
    print(os.path.abspath(publish.build(args.paths, args.report, table=table, extra={"agreement": found})))
    return 0


# -- reproduce, predict -----------------------------------------------------------------------------

def add_reproduce(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="RUN", help="two or more run folders of one machine")
    options.add(p, "--record")


def reproduce_runs(args: argparse.Namespace) -> int:
    """One machine's runs side by side: each answer's figure per run, its interval, and the figures that fall
    outside another run's."""
    from reports import measured, reproduce

    if args.record:
        records.check_record_path(args.record, "reproducibility")
    runs = [reproduce.figures(path) for path in args.paths]
    t = reproduce.table(runs)
    print(reproduce.show(runs, t))
    moved = kept = None
    if len(args.paths) >= 3:  # what moves between them, kept for this machine's later runs
        moved = reproduce.between_runs(runs)
        facts = records.read_json(os.path.join(args.paths[0], "machine.json"))["machine"]
        file = between_runs.save(facts, moved)
        kept = between_runs.load(facts)
        print("\n" + reproduce.show_between(moved) + f"\nKept for later runs of {runs[0]['machine']} ({file}), pooled "
              f"with the batches of runs kept before ({kept['batches']} in all, {len(kept['runs'])} runs): "
              + rerun.between_widths(kept["variance"], kept["figures"]) + ". Their intervals add it.")
    if args.record:
        measured.save(args.record, "reproducibility", runs[0]["commit"],
                      runs=[{**{k: r[k] for k in ("run", "machine", "cpu", "commit", "host")}, "added": r["between"]}
                            for r in runs],
                      summary=reproduce.summary(t), figures=t.to_dict(orient="records"), between_runs=moved,
                      kept_between_runs=kept)
    return 0


def add_predict(p: argparse.ArgumentParser) -> None:
    p.add_argument("sheet", help="a datasheet (docs/machines/*.json) or a run folder / machine.json with constants")
    p.add_argument("run", nargs="?", default=os.path.join("results", "runs", f"{socket.gethostname()}-default"),
                   help="the run folder whose cases are priced (default results/runs/<hostname>-default, the main "
                   "job's)")
    p.add_argument("--dtype", default="float32", help="the datasheet's peak for this dtype (default float32)")
    options.add(p, "--csv", "--record")


def prediction(args: argparse.Namespace) -> int:
    """A run's cases predicted on another machine, from its datasheet or its measured constants."""
    from reports import measured, predict

    if not os.path.isdir(args.run):
        raise FileNotFoundError(f"{args.run!r}: no such run folder; measure one first (attention-bench run) or "
                                "name one")
    if args.record:
        records.check_record_path(args.record, "prediction")
    text, fields = predict.main(args.sheet, args.run, args.csv, args.dtype)
    print(text)
    if args.record:
        commit = records.read_json(os.path.join(args.run, "machine.json")).get("commit")
        measured.save(args.record, "prediction", commit, dtype=args.dtype, **fields)
    return 0


# -- csv, claims, measured, site --------------------------------------------------------------------

def add_csv(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="RESULTS", help=RESULTS_HELP)
    options.add(p, "--csv")


def export_csv(args: argparse.Namespace) -> int:
    """The tidy table (one row per case and metric) as CSV: to --csv FILE, else on stdout."""
    from reports import columns, tidy

    if args.csv is None:
        tidy.load(args.paths).to_csv(sys.stdout, index=False)
        return 0
    guards.writable_file(args.csv, "--csv")
    columns.check_csv_path(args.csv, columns.COLUMNS[:2], "--csv")
    columns.write_csv(tidy.load(args.paths), args.csv, "--csv")
    print(os.path.abspath(args.csv))
    return 0


def add_claims(p: argparse.ArgumentParser) -> None:
    pass


def print_claims(args: argparse.Namespace) -> int:
    """The claims the suite tests, as docs/CLAIMS.md holds them."""
    from reports import claims

    print(claims.markdown(), end="")
    return 0


def add_measured(p: argparse.ArgumentParser) -> None:
    p.add_argument("record", nargs="?", help="a report's report.json or a command's --record, kept under "
                   "docs/measured/")
    p.add_argument("--update", nargs="+", metavar="PAGE",
                   help="rewrite every generated block of these pages (README.md, docs/MEASURED.md) from its record")
    p.add_argument("--analysis", action="append", metavar="KEY", help="only this analysis of a report (repeatable; "
                   "default: all); answers: its answers table")
    p.add_argument("--for", metavar="PAGE", help="the page the block goes in, its links relative to it (default: the "
                   "project's README)")


def print_measured(args: argparse.Namespace) -> int:
    """A page's block generated from a saved record, or every generated block of pages rewritten (--update)."""
    from reports import measured

    if args.update:
        for page in args.update:
            print(f"{page}: {measured.refresh(page)} generated blocks, each from its record")
        return 0
    if args.record is None:
        raise ValueError("give a record (docs/measured/<name>.json) or --update PAGE")
    print(measured.markdown(measured.load(args.record), args.record, args.analysis,
                            getattr(args, "for") or measured.README), end="")
    return 0


def add_site(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="asv.conf.json", help="asv's configuration (default asv.conf.json)")
    p.add_argument("histories", metavar="HISTORY", nargs="*",
                   help="a paired history's folder (attention-bench history --history) to draw beside asv's own "
                        f"graphs (default: every folder in {history.HISTORIES})")
    options.add(p, "--machine")


def site(args: argparse.Namespace) -> int:
    """asv's history site (asv publish) with the paired histories' graphs beside asv's own, and the JavaScript it
    loads served from the site: it opens offline."""
    from reports import asv_site

    try:
        path = asv_site.publish(args.config, histories=args.histories or None, machine=args.machine)
    except asv_site.PublishFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(os.path.abspath(path))
    print("open it with `asv preview` (a web server on localhost); it needs no internet", file=sys.stderr)
    return 0


COMMANDS = {
    "report": ("the report on results already measured", add_report, report),
    "compare": ("machines or runs side by side: what differs beyond the noise", add_compare, compare),
    "reproduce": ("one machine's runs: each answer's figure per run, and those outside another run's interval",
                  add_reproduce, reproduce_runs),
    "predict": ("a run's cases predicted on another machine (a datasheet or measured constants)", add_predict,
                prediction),
    "csv": ("the tidy table as CSV", add_csv, export_csv),
    "claims": ("the claims the suite tests", add_claims, print_claims),
    "measured": ("a README block generated from a saved record", add_measured, print_measured),
    "site": ("asv's history site, published to open offline", add_site, site),
}
