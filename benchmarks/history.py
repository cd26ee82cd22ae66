"""A commit history at the gate's precision: every commit timed paired against one reference commit.

    attention-bench history main~10..main --grid quick --area multihead --method forward

For each commit of a range (oldest first), every selected case runs in two workers, one with the reference's
models and one with the commit's, in mirrored blocks (the gate's measurement, ``benchmarks.gate.compare``): a
ratio commit/reference per case with its 95% interval, timed until every interval is no wider than the threshold
(what telling one commit from the next needs) or the commit's budget is spent. Against one reference, not a
chain of neighbours, so that errors do not add up along the history. A commit whose ``transformer/`` is the same
tree as one already timed is recorded as the same models (``same_as``), not timed again. One record per commit
(``<folder>/<commit>.json``, kind ``history``), written atomically when the commit is done: an interrupted
history resumes at the commit it stopped in. A step: a case whose ratio moved from the previous commit's by more
than the threshold, with the two intervals apart.
"""

from __future__ import annotations

import itertools
import os
import sys
import time

from . import gate
from .core import envelope
from .core.records import UnreadableRecord, case_key, read_json, write_json_atomic

#: a commit's record in the history's folder
#: where the histories are kept, one folder each (``reports.asv_paired`` draws every one)
HISTORIES = os.path.join("results", "history")
RECORD = "{commit}.json"


def commits(spec: str | None, listed: str | None = None) -> list[str]:
    """The commits, oldest first: those of an asv-style range (``A..B``: after A, up to B, along first parents),
    one commit, or those listed one per line in the file ``listed``; ValueError naming what does not resolve,
    or a range with no commit in it."""
    if listed:
        try:
            with open(listed) as f:
                names = [line.split("#")[0].strip() for line in f]
        except OSError as error:
            raise ValueError(f"--commits {listed!r}: cannot read it ({error.strerror or error})") from None
        found = [gate.resolve(n) for n in names if n]
    elif spec and ".." in spec:
        first, _, last = spec.partition("..")
        gate.resolve(first or "HEAD"), gate.resolve(last or "HEAD")
        found = gate.git("rev-list", "--reverse", "--first-parent", spec).split()
    elif spec:
        found = [gate.resolve(spec)]
    else:
        raise ValueError("give a range of commits (e.g. main~10..main) or --commits FILE")
    if not found:
        raise ValueError(f"{spec or listed!r}: no commit in it (A..B holds the commits after A up to B)")
    return list(dict.fromkeys(found))


def models_tree(commit: str) -> str | None:
    """The git tree of the commit's ``transformer/`` (None where it has none): equal trees, equal models."""
    try:
        return gate.git("rev-parse", "--verify", "--quiet", f"{commit}:transformer")
    except ValueError:
        return None


def check(history: list[str], reference: str | None) -> str:
    """The reference, resolved (default: the history's first commit); ValueError when it is not one of the
    history's commits or cannot build the cases (no ``transformer/``)."""
    reference = history[0] if reference is None else gate.resolve(reference)
    if reference not in history:
        raise ValueError(f"--reference {reference[:8]} is not one of the {len(history)} commits of the history: "
                         "give one of them (default: the first)")
    gate.check_models(reference)
    gate.check_cases_committed()
    return reference


def _reference_rows(todo: list[tuple[str, dict, str]]) -> list[dict]:
    return [{"area": area, "method": method, "params": params, "case": case_key(area, method, params),
             "ratio": 1.0, "low": 1.0, "high": 1.0, "verdict": "reference"} for area, params, method in todo]


def measure(history: list[str], reference: str, todo: list[tuple[str, dict, str]], threshold: float,
            budget: float, total_budget: float, folder: str, progress: bool = True) -> list[dict]:
    """Each commit's record, timing those not recorded yet until ``total_budget`` seconds are spent (a commit
    ``budget`` seconds at most); the records in the history's order (the commits not reached have none).
    Ctrl-C leaves every finished commit's record whole and the commit it stopped in unrecorded."""
    started, done = time.monotonic(), []
    timed: dict[str | None, str] = {models_tree(reference): reference}
    for commit in history:
        path = os.path.join(folder, RECORD.format(commit=commit))
        record = _recorded(path, reference)
        if record is None:
            tree = models_tree(commit)
            same = timed.get(tree)
            if tree is None:
                record = {"status": "no models", "reason": "no transformer/ folder: it cannot build the cases"}
            elif same is not None:
                earlier = _recorded(os.path.join(folder, RECORD.format(commit=same)), reference)
                rows = _reference_rows(todo) if same == reference else earlier["cases"]
                record = {**envelope.envelope("history", commit, None), "status": "ok", "same_as": same,
                          "cases": rows}
            else:
                left = total_budget - (time.monotonic() - started)
                if left <= 0:
                    print(f"the history's budget ({total_budget:g} s) is spent at commit {commit[:8]}: run the same "
                          "command again to go on", file=sys.stderr)
                    break
                rows, stopped = gate.compare(reference, commit, todo, threshold, min(budget, left), path, progress,
                                             precision=threshold)
                if isinstance(stopped, KeyboardInterrupt):
                    os.remove(path)  # this commit is timed again on resume
                    raise stopped
                record = {**read_json(path), "status": "ok" if stopped is None else "stopped",
                          "reason": None if stopped is None else str(stopped)}
            record = {**record, "kind": "history", "commit": commit, "reference": reference, "tree": tree}
            write_json_atomic(path, record)
        timed.setdefault(record.get("tree"), commit)
        done.append(record)
    return done


def _recorded(path: str, reference: str) -> dict | None:
    """The commit's record if it holds a finished comparison against ``reference`` (else None: timed again)."""
    if not os.path.exists(path):
        return None
    try:
        record = read_json(path)
    except UnreadableRecord:
        return None
    return record if record.get("kind") == "history" and record.get("reference") == reference else None


def steps(records: list[dict], threshold: float) -> list[dict]:
    """Where a case's ratio moved from one commit to the next by more than ``threshold`` (either way) with the
    two commits' intervals apart: the commit, the one before it, the case and the change with its bounds."""
    found = []
    timed = [r for r in records if r.get("status") == "ok"]
    for before, after in itertools.pairwise(timed):
        earlier = {c["case"]: c for c in before["cases"] if c.get("ratio") is not None}
        for case in after["cases"]:
            was = earlier.get(case["case"])
            if was is None or case.get("ratio") is None:
                continue
            change = case["ratio"] / was["ratio"]
            apart = case["low"] > was["high"] or case["high"] < was["low"]
            if apart and (change >= 1 + threshold or change <= 1 / (1 + threshold)):
                found.append({"commit": after["commit"], "previous": before["commit"], "case": case["case"],
                              "change": change, "low": case["low"] / was["high"], "high": case["high"] / was["low"]})
    return found


def show(records: list[dict], found: list[dict]) -> str:
    """The history as text: per commit, its cases' ratios against the reference; then the steps."""
    lines = []
    for r in records:
        said = f"same models as {r['same_as'][:8]}" if r.get("same_as") else r["status"]
        lines.append(f"{r['commit'][:8]}  {said}")
        for c in r.get("cases", []):
            ratio = "" if c.get("ratio") is None else f"{c['ratio']:.3f} ({c['low']:.3f}-{c['high']:.3f})"
            lines.append(f"    {c['case'][:70]:<70} {ratio:>22} {c.get('verdict', '')}")
    lines.append(f"{len(found)} step{'s' * (len(found) != 1)}" + (":" if found else ""))
    lines += [f"    {s['commit'][:8]} (after {s['previous'][:8]}): {s['case'][:70]} x{s['change']:.3f} "
              f"({s['low']:.3f}-{s['high']:.3f})" for s in found]
    return "\n".join(lines)
