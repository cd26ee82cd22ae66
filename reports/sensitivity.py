"""The gate's sensitivity, as ``scripts/gate_sensitivity.py`` records it: per method (the gate, asv's settings)
and injected slowdown, the cases flagged in each trial; the docs' paragraph and table, and the report's."""

from __future__ import annotations

import glob
import os
import statistics
import sys

import pandas as pd

from benchmarks.core.records import read_json

from .columns import machine_line, short_commit


def _by_injected(by_head: dict) -> list[tuple[str, list[dict]]]:
    """The control first, then the injected slowdowns from the smallest (a record's keys are sorted as text)."""
    return sorted(by_head.items(), key=lambda kv: -1.0 if kv[0] == "control" else float(kv[0].rstrip("%")))


#: the gate's command, and its name in older records (the same gate, before the one command line)
GATE, OLD_GATE = "attention-bench gate", "python -m benchmarks.gate"


def _methods(record: dict) -> list[tuple[str, dict]]:
    """The gate first, then asv's settings; the gate under its command's name."""
    named = [(GATE + k[len(OLD_GATE):] if k.startswith(OLD_GATE) else k, v) for k, v in record["results"].items()]
    return sorted(named, key=lambda kv: (not kv[0].startswith(GATE), kv[0]))


def _flag_range(trials: list[dict]) -> str:
    rates = [t["slower"] / t["cases"] for t in trials]
    low, high = min(rates), max(rates)
    return f"{low:.0%}" if low == high else f"{low:.0%}-{high:.0%}"


def summary(record: dict, name: str, link: str) -> list[str]:
    """One paragraph: per method, the share of cases flagged at each injected slowdown (range over trials),
    false alarms on the control, and the longest comparison."""
    parts = []
    for method, by_head in _methods(record):
        seen = ", ".join(f"{_flag_range(trials)} at {injected}" for injected, trials in _by_injected(by_head)
                         if injected != "control")
        control = by_head.get("control", [])
        alarms = sum(t["slower"] for t in control)
        longest = max(t["seconds"] for trials in by_head.values() for t in trials)
        parts.append(f"`{method}` flagged {seen} of the cases (the range over trials) and raised {alarms} false "
                     f"alarm{'s' if alarms != 1 else ''} over {len(control)} no-change trials, at most "
                     f"{longest:.0f} s a comparison")
    return [f"Measured on {machine_line(record['machine'])} ({record['generated'][:10]}, [`{name}`]({link}), "
            f"{record['trials']} trials of slowdowns injected into equation (1)'s 8 CPU forward cases): "
            + "; ".join(parts) + "."]


def table(record: dict) -> pd.DataFrame:
    """A gate-sensitivity record as a table: per method and injected slowdown, the cases flagged slower in each
    trial, the median ratio head/base (asv: of the rows it printed) and each trial's seconds."""
    rows = []
    for method, by_head in _methods(record):
        for injected, trials in _by_injected(by_head):
            ratios = [r for t in trials for r in t["ratios"]]
            rows.append({"method": method, "injected": "none (a comment)" if injected == "control" else injected,
                         "cases flagged slower, per trial": ", ".join(f"{t['slower']} of {t['cases']}" for t in trials),
                         "median ratio head/base (asv: of the rows it printed)":
                             f"{statistics.median(ratios):.3f}" if ratios else "-",
                         "seconds, per trial": ", ".join(f"{t['seconds']:.0f}" for t in trials)})
    return pd.DataFrame(rows)


def caption(record: dict) -> str:
    return (f"{machine_line(record['machine'])}, {record['generated'][:16]}, commit {short_commit(record['commit'])}"
            + ("" if record.get("done", True) else ", stopped before its last trial") + f": {record['trials']} "
            "trials of slowdowns injected into equation (1) (a spin for that share of each call's own time) and a "
            f"no-change control, on its CPU forward cases; the gate's budget {record['budget_s']:g} s")


#: where the report looks for the latest gate-sensitivity record: this machine's, and the docs' saved ones
RECORDS = (os.path.join("results", "gate", "sensitivity.json"),
                       os.path.join("docs", "measured", "*gate-sensitivity*.json"))


def _has_trials(record: dict) -> bool:
    """The record holds at least one method with one injected change measured in one trial or more, each
    trial with its counts."""
    results = record.get("results")
    return isinstance(results, dict) and any(
        isinstance(by_head, dict) and any(isinstance(trials, list) and trials and all(
            isinstance(t, dict) and {"slower", "cases", "ratios", "seconds"} <= set(t) for t in trials)
            for trials in by_head.values())
        for by_head in results.values())


def latest(patterns=RECORDS) -> tuple[str, dict] | None:
    """The newest readable gate-sensitivity record among ``patterns`` (by when it was generated): (path, record)."""
    found = []
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                record = read_json(path)
            except (OSError, ValueError):
                continue
            if record.get("kind") != "gate-sensitivity":
                continue
            if not _has_trials(record):
                print(f"warning: {path}: a gate-sensitivity record with no trial in it; not shown", file=sys.stderr)
                continue
            found.append((record.get("generated", ""), path, record))
    return max(found, key=lambda f: f[0])[1:] if found else None
