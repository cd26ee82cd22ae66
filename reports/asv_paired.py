"""A paired history (``attention-bench history``'s records) as asv results: asv's site draws it beside its own graphs.

Each case a history timed becomes part of the asv benchmark ``<area module>.<Class>.track_vs_reference_<method>``,
next to the class's ``time_<method>`` in asv's tree, with the same parameters (the history's grid). Its value at a
commit is the case's time relative to the reference commit (1 at the reference), and its 95% interval goes into
asv's ``ci_99`` statistics fields, the only interval fields asv's results have (asv weighs its own step detection
by them). The results are written under asv's results folder for the machine ``machine`` with the environment
name ``paired-<reference>``, one file per commit (``asv.results.Results``); their definitions are merged into
asv's benchmarks.json, which ``asv run`` rewrites from the suite, so ``attention-bench site`` merges them before
every ``asv publish``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import platform

import pandas as pd

from benchmarks import cases, gate, history
from benchmarks.core import envelope
from benchmarks.core.records import UnreadableRecord, read_json, write_json_atomic

from .asv_table import PAIRED_PREFIX, asv_classes

PREFIX = PAIRED_PREFIX
#: what asv's graphs label the values with
UNIT = "time / reference's"
#: the version of these benchmarks' definition (asv keeps results of one version together)
VERSION = "paired-1"


def asv_class_name(area: str) -> str:
    """``<module>.<Class>`` of the area's asv class (its ``bench_<area>.py``): where asv's tree puts its graphs."""
    for name, cls in asv_classes().items():
        if getattr(cls, "area", None) == area:
            return f"{cls.__module__.split('.', 1)[1]}.{name}"
    raise ValueError(f"area {area!r} has no asv class; allowed: {', '.join(cases.AREAS)}")


def benchmarks_of(records: list[dict]) -> dict[tuple[str, str], dict]:
    """(area, method) -> the asv benchmark definition (a benchmarks.json entry) of every pair the records timed,
    its parameters the values the history's cases take on each axis, in the order the cases come."""
    out = {}
    timed = [c for r in records for c in r.get("cases", [])]
    for area, method in sorted({(c["area"], c["method"]) for c in timed}):
        names = list(cases.axes(area, "full"))
        mine = [c for c in timed if (c["area"], c["method"]) == (area, method)]
        values = {a: list(dict.fromkeys(c["params"][a] for c in mine)) for a in names}  # in the grid's order
        name = f"{asv_class_name(area)}.{PREFIX}{method}"
        out[area, method] = {"name": name, "type": "track", "unit": UNIT, "version": VERSION, "timeout": 0,
                             "param_names": names, "params": [[repr(v) for v in values[a]] for a in names],
                             "pretty_name": f"{name} (paired against one reference commit)", "code": ""}
    return out


def _values(record: dict, definition: dict, area: str, method: str) -> tuple[list, list]:
    """The record's ratios over the benchmark's parameter product (None where not timed) and asv stats for them."""
    got = {tuple(repr(c["params"][a]) for a in definition["param_names"]): c for c in record.get("cases", [])
           if c["area"] == area and c["method"] == method and c.get("ratio") is not None}
    values, stats = [], []
    for combo in itertools.product(*definition["params"]):
        case = got.get(combo)
        values.append(None if case is None else case["ratio"])
        stats.append(None if case is None else {"ci_99_a": case["low"], "ci_99_b": case["high"], "number": 1,
                                                "repeat": case.get("rounds", 1)})
    return values, stats


def _machine_json(results_dir: str, machine: str) -> None:
    """asv's machine.json for ``machine`` (asv publish needs one per machine folder), unless asv wrote one."""
    path = os.path.join(results_dir, machine, "machine.json")
    if not os.path.exists(path):
        write_json_atomic(path, {"machine": machine, "arch": platform.machine(), "cpu": platform.processor(),
                                 "num_cpu": str(os.cpu_count()), "os": platform.platform(), "ram": "",
                                 "version": 1})


def merge_benchmarks(results_dir: str, definitions: dict[str, dict]) -> None:
    """Add ``definitions`` to asv's benchmarks.json in ``results_dir`` (created if there is none)."""
    path = os.path.join(results_dir, "benchmarks.json")
    known = read_json(path) if os.path.exists(path) else {"version": 2}
    write_json_atomic(path, {**known, **definitions})


def write(records: list[dict], results_dir: str, machine: str) -> list[str]:
    """Write a history's timed records (status ok) as asv results of ``machine`` under ``results_dir`` and merge their
    definitions into benchmarks.json; returns the files written. ValueError unless the records name one reference."""
    from asv.results import Results  # asv is a test and site dependency; the runner does not need it
    from asv.runner import BenchmarkResult

    timed = [r for r in records if r.get("status") == "ok" and r.get("cases")]
    if not timed:
        return []
    references = {r.get("reference") for r in timed}
    if None in references or len(references) != 1:
        raise ValueError(f"a history's records name one reference commit; these name {sorted(map(str, references))}")
    definitions = benchmarks_of(timed)
    _machine_json(results_dir, machine)
    env = f"paired-{references.pop()[:8]}"
    params, requirements, python = _asv_configuration(results_dir, machine)
    written = []
    for record in timed:
        res = Results(params, requirements, record["commit"], _date(record), python, env, {})
        for (area, method), definition in definitions.items():
            values, stats = _values(record, definition, area, method)
            none = [None] * len(values)
            res.add_result(definition, BenchmarkResult(result=values, samples=none, number=none, errcode=0,
                                                       stderr="", profile=None))
            # asv's add_result computes stats from samples only: the paired interval goes in as they are stored
            res._stats[definition["name"]] = stats if any(s is not None for s in stats) else None
        res.save(results_dir)
        written.append(os.path.join(results_dir, res._filename))
    merge_benchmarks(results_dir, {d["name"]: d for d in definitions.values()})
    return written


def _asv_configuration(results_dir: str, machine: str) -> tuple[dict, dict, str]:
    """The parameters, requirements and Python of asv's own newest results for ``machine``, so that asv's site
    files the paired graphs under the configuration its own graphs have (the page asks for a graph per
    configuration, and a paired one filed elsewhere is a missing file); ``{"machine": machine}`` without any."""
    folder = os.path.join(results_dir, machine)
    newest: dict = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".json") and name != "machine.json" and "-paired-" not in name:
            try:  # asv's results file (format 2): params, requirements, python, date at its top level
                data = read_json(os.path.join(folder, name))
            except UnreadableRecord:
                continue
            if "params" in data and data.get("date", 0) >= newest.get("date", 0):
                newest = data
    if not newest:
        return {"machine": machine}, {}, ""
    return dict(newest["params"]), dict(newest.get("requirements") or {}), newest.get("python") or ""


def _date(record: dict) -> int:
    """The commit's date in ms (asv's results hold it), from git, or when the record was made where this checkout
    does not have the commit."""
    try:
        return int(gate.git("show", "-s", "--format=%ct", record["commit"])) * 1000
    except ValueError:
        made = envelope.when(record)
        return int(dt.datetime.fromisoformat(made).timestamp() * 1000) if made else 0


def folders(root: str = history.HISTORIES) -> list[str]:
    """The history folders under ``root`` (a history is a folder of records; other files there are not)."""
    found = [os.path.join(root, d) for d in sorted(os.listdir(root))] if os.path.isdir(root) else []
    return [f for f in found if os.path.isdir(f)]


def steps_table(folders: list[str]) -> pd.DataFrame:
    """The steps of every paired history in ``folders`` (``history.steps`` at each history's own threshold): the
    history, the commit, the one before it, the case, and the change with its bounds."""
    from benchmarks import history

    rows = []
    for folder in folders:
        records = load_history(folder)
        threshold = next((r["threshold"] for r in records if r.get("threshold") is not None), None)
        if threshold is None:
            continue
        for s in history.steps(records, threshold):
            rows.append({"history": os.path.basename(os.path.normpath(folder)), "commit": s["commit"][:8],
                         "after": s["previous"][:8], "case": s["case"], "change": f"{s['change']:.3f}",
                         "95% bounds": f"{s['low']:.3f}-{s['high']:.3f}", "threshold": f"{threshold:.0%}"})
    return pd.DataFrame(rows)


def load_history(folder: str) -> list[dict]:
    """The history records (kind ``history``) in ``folder``, in the order they were timed (a history times its
    commits oldest first); files that are not one are passed over."""
    out = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            try:
                record = read_json(os.path.join(folder, name))
            except UnreadableRecord:
                continue
            if record.get("kind") == "history":
                out.append(record)
    return sorted(out, key=lambda r: envelope.when(r))
