"""A report built from run folders or asv results: refused when nothing was measured, replacing an older one only
whole, beside asv's site when there is one."""

from __future__ import annotations

import os
import sys

from benchmarks.core import guards

from . import asv_paired, html, sensitivity, tidy
from .analyses.runs import latest_run


def asv_html(paths: list[str]) -> str | None:
    """asv's published site next to the results, as a path relative to the report (if it exists)."""
    for candidate in [os.path.join(os.path.dirname(os.path.abspath(p)), "html", "index.html") for p in paths] + [
            os.path.abspath(os.path.join(".asv", "html", "index.html"))]:
        if os.path.exists(candidate):
            return candidate
    return None


def build(paths: list[str], out: str, machine: str | None = None, table=None, extra: dict | None = None) -> str:
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
    site = asv_html(paths)
    lead = machine or next(iter(dict.fromkeys(table.machine.dropna())), None)
    lead_run = latest_run(table[table.machine == lead])
    folders = [p for p in tidy.unique_paths(paths) if os.path.normpath(p) == lead_run]
    # a relative link keeps working when the report and .asv/html move together
    try:
        found = sensitivity.latest()
        gate = None if found is None else (f"{found[0]}: {sensitivity.caption(found[1])}", sensitivity.table(found[1]))
        histories = asv_paired.folders()
        steps = asv_paired.steps_table(histories) if histories else None
        found = sensitivity.latest_history()
        history = None if found is None else (f"{found[0]}: {sensitivity.history_caption(found[1])}",
                                              sensitivity.history_table(found[1]))
        index = html.build(table, out, machine=machine, asv_html=os.path.relpath(site, out) if site else None,
                           gate=gate, history=history, steps=steps,
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
