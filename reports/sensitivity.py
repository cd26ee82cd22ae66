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


def _newest(patterns, kind: str, usable, empty: str) -> tuple[str, dict] | None:
    """The newest readable record of ``kind`` among ``patterns`` (by when it was generated) that is ``usable``:
    (path, record); one that is not is named in a warning, ``empty`` saying what it lacks."""
    found = []
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                record = read_json(path)
            except (OSError, ValueError):
                continue
            if record.get("kind") != kind:
                continue
            if not usable(record):
                print(f"warning: {path}: a {kind} record {empty}; not shown", file=sys.stderr)
                continue
            found.append((record.get("generated", ""), path, record))
    return max(found, key=lambda f: f[0])[1:] if found else None


def latest(patterns=RECORDS) -> tuple[str, dict] | None:
    """The newest readable gate-sensitivity record among ``patterns`` (by when it was generated): (path, record)."""
    return _newest(patterns, "gate-sensitivity", _has_trials, "with no trial in it")


# -- a synthetic history timed paired and by asv (scripts/history_vs_asv.py) ---------------------------------

#: where the report looks for the latest history-vs-asv record
HISTORY_RECORDS = (os.path.join("results", "history", "history-vs-asv.json"),
                   os.path.join("docs", "measured", "*history-vs-asv*.json"))


def step_sizes(record: dict) -> tuple[str, str]:
    """The synthetic history's slowdown at commit 4 and speed-up at commit 8, from its spins (``factors``), as
    per cents to a tenth ("10%", "4.8%")."""
    f = record["factors"]
    return tuple(f"{x:.1%}".replace(".0%", "%") for x in ((1 + f[4]) / (1 + f[3]) - 1, 1 - (1 + f[8]) / (1 + f[7])))


def _named(score: dict, step: str) -> str:
    share = next((v for k, v in score["found"].items() if k.startswith(step + " ")), None)
    return "-" if share is None else f"{share:.0%}"


def history_table(record: dict) -> pd.DataFrame:
    """Per method (the paired history, asv's step detection, asv's regressions list): the share of the cases that
    name each true step, the false steps named, and what it took."""
    rows, results = [], record["results"]
    paired = results.get("paired", {})
    per_commit = [s for s in paired.get("seconds_per_timed_commit", []) if s]
    took = {"paired": f"{paired.get('seconds', 0) / 60:.1f} min" + (
        f", {statistics.median(per_commit):.0f} s a timed commit" if per_commit else ""),
        "asv": f"{results['asv']['seconds'] / 60:.1f} min" if "asv" in results else "-"}
    names = {"paired": f"attention-bench history (paired; threshold {record['threshold']:.0%})",
             "asv": f"asv run {record['asv_setting']}: asv's step detection",
             "asv regressions list": f"asv run: asv's regressions list ({record['asv_regression_threshold']:.0%})"}
    up, down = step_sizes(record)
    for key in _score_order(record):
        score = record["scores"][key]
        rows.append({"method": names.get(key, key), "cases": score["cases"],
                     f"{up} slowdown at commit 4: named in": _named(score, "4"),
                     f"{down} speed-up at commit 8: named in": "- (lists slowdowns only)"
                     if key == "asv regressions list" else _named(score, "8"),
                     "false steps": len(score["false_steps"]), "time": took["asv" if key.startswith("asv") else key]})
    return pd.DataFrame(rows)


def history_summary(record: dict, name: str, link: str) -> list[str]:
    """One paragraph: the share of the cases in which each method named the two true steps, and its false steps."""
    table = history_table(record)
    short = {"paired": "`attention-bench history`", "asv": "asv's step detection",
             "asv regressions list": "asv's regressions list"}
    said = [f"{short.get(key, key)} {row.iloc[2]}" + ("" if row.iloc[3].startswith("-") else f" and {row.iloc[3]}")
            + f", {row['false steps']} false" for key, (_, row) in zip(_score_order(record), table.iterrows(),
                                                                       strict=True)]
    paired = record["results"].get("paired", {}).get("seconds_per_timed_commit") or [0]
    up, down = step_sizes(record)
    return [f"On a synthetic ten-commit history ([`{name}`]({link}), {machine_line(record['machine'])}; equation "
            f"(1)'s {record['cases']} CPU forward cases, {up} slower at commit 4, {down} faster at commit 8), the "
            "share of the cases naming each step: " + "; ".join(said)
            + f" ({statistics.median(paired):.0f} s a commit paired)."]


def _score_order(record: dict) -> list[str]:
    order = ["paired", "asv", "asv regressions list"]
    return sorted(record["scores"], key=lambda k: order.index(k) if k in order else 9)


def history_caption(record: dict) -> str:
    return (f"{machine_line(record['machine'])}, {record['generated'][:16]}, commit {short_commit(record['commit'])}: "
            f"ten commits of equation (1)'s module, a {step_sizes(record)[0]} slowdown at commit 4 and a "
            f"{step_sizes(record)[1]} speed-up at commit 8 (a spin "
            f"for a share of each call's own time), the others changing only a comment; the attention area's "
            f"{record['cases']} CPU forward cases; the history's budget {record['budget_s']:g} s a commit")


def latest_history(patterns=HISTORY_RECORDS) -> tuple[str, dict] | None:
    """The newest readable history-vs-asv record among ``patterns``: (path, record)."""
    return _newest(patterns, "history-vs-asv", lambda r: isinstance(r.get("scores"), dict), "with no scores in it")
