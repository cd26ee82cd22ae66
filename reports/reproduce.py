"""Do one machine's answers hold from run to run? Each figure of every answer, per run, with the interval each
run states, and the figures that fall outside another run's interval.

    attention-bench reproduce RUN RUN [RUN ...]        run folders of one machine (results/runs/<name>)

A run's figures are its analyses' numbers (``reports.analyses``: what the page's answers quote), computed
from that run alone; a figure's interval is the one the run states (``Analysis.intervals``: where a rerun's
figure lands with 95% confidence, ``benchmarks.core.timing.rerun``). For each figure and each ordered pair of
runs (i, j), run i's value is checked against run j's interval, or, where run j states none, against
run j's value within ±TOLERANCE. A figure whose value any other run's interval leaves out is ``outside``.
Intervals that say what they claim leave out about 5% of these checks, spread over the figures; far more
means the machine moved between runs by more than a run's own processes show.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd

from benchmarks.core.timing import rerun

from . import ranges, spans_over_processes, tidy
from .analyses import profiling
from .analyses.base import group
from .analyses.registry import run_all

#: where a run states no interval for a figure, another run's value within this relative distance agrees
TOLERANCE = 0.05
#: analyses compared across machines, not within one run
NOT_PER_RUN = ("hardware",)


def figures(folder: str, table: pd.DataFrame | None = None) -> dict:
    """One run folder's figures: {"run", "machine", "cpu", "commit", "figures": {key: (value, low, high)},
    "own": the same with the run's own intervals, "quoted": the keys the answers quote, "counts": the keys that
    count (their interval a count's, ``Analysis.caps``), "between": the variance
    between the machine's runs its ``machine.json`` holds}, each key ``<analysis>.<number>``, low and high None
    where the run states no interval. A figure's interval in "figures" is the one the run states: its own,
    widened by its group's variance between runs (``Analysis.interval``). From ``table`` instead of the
    folder's cases where given (without its profiles and pairs: ``explained``)."""
    if not os.path.isfile(os.path.join(folder, "machine.json")):
        raise ValueError(f"{folder!r} is not a run folder (no machine.json): name folders that "
                         "attention-bench run measured")
    mine = table is None
    table = tidy.load([folder]) if mine else table
    machine = next(iter(dict.fromkeys(table.machine.dropna())), None)
    analyses = run_all(table, machine, profiling.table(tidy.load_profiles([folder], machine)) if mine else None,
                       tidy.load_pairs([folder], machine) if mine else [], between=False)
    moved = tidy.between_of_run(folder)
    found, own, quoted, counts = {}, {}, [], []
    for a in (ranges.check(a) for a in analyses if a.key not in NOT_PER_RUN):
        quoted.extend(f"{a.key}.{key}" for key in a.quoted)
        counts.extend(f"{a.key}.{key}" for key in a.caps)
        for key, value in a.numbers.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                low, high = a.intervals.get(key, (None, None))
                own[f"{a.key}.{key}"] = (float(value), low, high)
                if low is not None:
                    low, high = a.stated(key, low, high, moved.get(group(a.key, key)))
                found[f"{a.key}.{key}"] = (float(value), low, high)
    first = table.iloc[0]
    return {"run": folder, "machine": machine, "host": host(folder) if mine else {},
            "cpu": f"{first.cpu_model}, {first.cpu_count} cores, torch {first.torch}",
            "commit": next(iter(dict.fromkeys(table.commit.dropna())), None), "figures": found, "own": own,
            "quoted": [k for k in quoted if k in found], "counts": counts, "between": moved}


def host(folder: str) -> dict[str, float]:
    """How fast the host let this run's cores go: the median rate of the control GEMM timed around each CPU case
    (``benchmarks.core.hardware.control``), over every round, per thread count ({"2": FLOP/s}). A run whose host
    ran something else on its cores reads lower, which the VM's own counters do not show."""
    rates = {str(t): x for t, x in spans_over_processes.round_controls(tidy.counted(folder)[1]).items()}
    return {t: float(np.median(x)) for t, x in sorted(rates.items())}


def host_said(runs: list[dict]) -> str:
    """'The host, by the control GEMM's median rate over each run's rounds: run 1 98 GFLOP/s on 1 thread, 169 on 2;
    ...' where the runs measured it; else ''."""
    said = [f"run {i} " + ", ".join(f"{rate / 1e9:.0f} GFLOP/s on {t} thread{'s' * (t != '1')}"
                                    for t, rate in r["host"].items())
            for i, r in enumerate(runs, 1) if r.get("host")]
    return ("The host, by the control GEMM's median rate over each run's rounds (lower where it ran something else "
            "on the cores): " + "; ".join(said) + ".") if said else ""


def one_machine(runs: list[dict]) -> None:
    """ValueError naming each folder's machine when the runs are not all of one machine (by label and
    hardware): reproducibility is one machine's; ``reports compare`` sets machines side by side."""
    seen = {(r["machine"], r["cpu"]) for r in runs}
    if len(seen) > 1:
        named = "; ".join(f"{r['run']}: {r['machine']} ({r['cpu']})" for r in runs)
        raise ValueError(f"these runs are not of one machine ({named}); reproduce compares runs of one machine, "
                         "attention-bench compare compares machines")


def agrees(value: float, other: tuple[float, float | None, float | None]) -> bool:
    """Whether ``value`` lies in another run's interval, or within ±TOLERANCE of its value where it has none."""
    v, low, high = other
    if low is not None and high is not None:
        return low <= value <= high
    return abs(value / v - 1) <= TOLERANCE if v else value == v


def table(runs: list[dict]) -> pd.DataFrame:
    """One row per figure every run has: each run's value and interval, and ``outside``: how many (run, other
    run) pairs leave it outside (``agrees``), of ``pairs``."""
    if len(runs) < 2:
        raise ValueError(f"reproducibility needs two runs or more; got {len(runs)}")
    one_machine(runs)
    keys = [k for k in runs[0]["figures"] if all(k in r["figures"] for r in runs[1:])]
    rows = []
    for key in keys:
        got = [r["figures"][key] for r in runs]
        row = {"figure": key, "interval": all(low is not None for _, low, _ in got),
               "quoted": any(key in r.get("quoted", ()) for r in runs)}
        for i, (v, low, high) in enumerate(got, 1):
            row[f"run {i}"] = v
            row[f"run {i} interval"] = None if low is None else f"{low:.4g}-{high:.4g}"
        pairs = [(i, j) for i in range(len(got)) for j in range(len(got)) if i != j]
        row["outside"] = sum(not agrees(got[i][0], got[j]) for i, j in pairs)
        row["pairs"] = len(pairs)
        if row["interval"]:  # how wide the runs said it is: the median of their half-widths, relative
            row["half_width"] = float(np.median([math.sqrt(high / low) - 1 for _, low, high in got if low > 0]))
        row["spread"] = max(v for v, _, _ in got) / min(v for v, _, _ in got) - 1 if min(
            v for v, _, _ in got) > 0 else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def summary(t: pd.DataFrame) -> dict:
    """The counts a reader looks for: figures compared, those with an interval in every run, and how many of
    each kind fall outside another run's interval (or ±TOLERANCE)."""
    with_interval, quoted = t[t.interval], t[t.quoted]
    return {"figures": len(t), "with_interval": len(with_interval), "quoted": len(quoted),
            "quoted_outside": int((quoted.outside > 0).sum()), "quoted_checks": int(quoted.pairs.sum()),
            "quoted_checks_outside": int(quoted.outside.sum()),
            "outside": int((t.outside > 0).sum()), "outside_with_interval": int((with_interval.outside > 0).sum()),
            "checks_with_interval": int(with_interval.pairs.sum()),
            "median_half_width": float(with_interval.half_width.median()) if len(with_interval) else None,
            "checks_outside": int(with_interval.outside.sum()), "tolerance": TOLERANCE}


def show(runs: list[dict], t: pd.DataFrame) -> str:
    s = summary(t)
    lines = [f"{len(runs)} runs of {runs[0]['machine']} ({runs[0]['cpu']}): " + ", ".join(r["run"] for r in runs),
             f"{s['figures']} figures in every run; {s['outside']} fall outside another run's interval (or ±"
             f"{TOLERANCE:.0%} where it states none); of the {s['with_interval']} with an interval in every run, "
             f"{s['outside_with_interval']} do, in {s['checks_outside']} of {s['checks_with_interval']} checks "
             f"(95% intervals: about 5% expected)"
             + (f"; those intervals span ±{s['median_half_width']:.1%} at the median." if s["median_half_width"]
                is not None else "."),
             f"The answer table quotes {s['quoted']} of them: {s['quoted_outside']} fall outside another run's "
             f"interval (or ±{TOLERANCE:.0%}), in {s['quoted_checks_outside']} of {s['quoted_checks']} checks."]
    said = host_said(runs)
    lines += [said, ""] if said else [""]
    shown = t.sort_values(["outside", "interval"], ascending=False)
    columns = ["figure", "quoted"] + [c for c in t.columns if c.startswith("run ")] + ["outside", "pairs"]
    with pd.option_context("display.max_rows", None, "display.max_colwidth", 60, "display.width", 250):
        lines.append(shown[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return "\n".join(lines)


def between_runs(runs: list[dict]) -> dict:
    """What moves between these runs of one machine (``figures`` of each) beyond what each run states of its own
    figures: per group of figures (``analyses.base.group``: an analysis's figures, its paired ratios apart), the
    mean over the group's figures with an interval in every run of the variance of the figure's log across the
    runs less the variance each run states of it (``rerun.standard_error2`` of its own interval, as if from
    three samples), never below 0: {"variance": {group: v}, "figures": {group: n}, "runs": [...], "excess": the
    mean before it is held at 0, "dof": its degrees of freedom, figures x (runs - 1)}. Later runs of this machine
    add it, pooled with the batches of runs measured before (``benchmarks.core.hardware.between_runs``), to their
    intervals. A count (``counts``) is left out: its interval is a count's, not a spread of timings, and nothing
    is added to it."""
    if len(runs) < 3:
        raise ValueError(f"the variance between runs needs three runs or more; got {len(runs)}")
    one_machine(runs)
    excess: dict[str, list[float]] = {}
    counts = {key for r in runs for key in r.get("counts", ())}
    for key in (k for k in runs[0]["own"] if k not in counts):
        got = [r["own"].get(key) for r in runs]
        if any(g is None or g[1] is None or g[0] <= 0 or g[1] <= 0 for g in got):
            continue
        logs = np.log([v for v, _, _ in got])
        own = np.mean([rerun.standard_error2(low, high, 3) for _, low, high in got])
        analysis, number = key.split(".", 1)
        excess.setdefault(group(analysis, number), []).append(float(np.var(logs, ddof=1)) - float(own))
    return {"variance": {g: max(0.0, float(np.mean(x))) for g, x in sorted(excess.items())},
            "figures": {g: len(x) for g, x in sorted(excess.items())}, "runs": [r["run"] for r in runs],
            "excess": {g: float(np.mean(x)) for g, x in sorted(excess.items())},
            "dof": {g: len(x) * (len(runs) - 1) for g, x in sorted(excess.items())}}


def show_between(moved: dict) -> str:
    """What ``between_runs`` measured, as the half-width it adds to a figure's interval, group by group."""
    return ("Between these runs, beyond each run's own intervals (what a figure's interval gains, at its group's "
            "variance): " + rerun.between_widths(moved["variance"], moved["figures"]) + ".")


def differences(first: dict, other: dict, predicted: dict | None = None) -> pd.DataFrame:
    """Figure by figure, run ``other`` against run ``first`` (any machines): both values with their intervals
    and ``verdict``: "differs" when they are apart (``rerun.apart``), or, where a run states none, when neither
    value agrees with the other run's figure (``agrees``); else "same within the noise". With ``predicted``
    (``figures`` of the first run's cases as the other machine would run them, ``explained``), the change the
    performance model predicts from the two machines' constants beside the change measured."""
    rows = []
    for key, a in first["figures"].items():
        if key not in other["figures"]:
            continue
        b = other["figures"][key]
        apart = rerun.apart(a, b)  # None: an interval missing, or one reaching 0 (a count's), which has no log
        same = apart is False if apart is not None else (agrees(b[0], a) or agrees(a[0], b))
        rows.append({"figure": key, "first": a[0], "first interval": None if a[1] is None else f"{a[1]:.4g}-{a[2]:.4g}",
                     "second": b[0], "second interval": None if b[1] is None else f"{b[1]:.4g}-{b[2]:.4g}",
                     "change": b[0] / a[0] - 1 if a[0] else float("nan"),
                     **({"predicted change": predicted[key][0] / a[0] - 1 if a[0] and key in predicted else
                         float("nan")} if predicted is not None else {}),
                     "verdict": "same within the noise" if same else "differs"})
    return pd.DataFrame(rows)

