"""What another machine would do: a run's cases (the operators each executed, as its records keep them)
priced with another machine's constants, a datasheet (``docs/machines/*.json``: peak FLOP/s per dtype,
bandwidth, per-operator overhead) or a measured run's ``machine.json``, and the verdicts they imply. Every
figure is labelled predicted, never measured.

    attention-bench predict docs/machines/h100-sxm.json [results/runs/vm-default] [--csv F]
"""

from __future__ import annotations

import os

import pandas as pd

from benchmarks.core.hardware import perfmodel
from benchmarks.core.records import read_json

from . import columns, tidy
from .analyses.base import fmt_ratio, fmt_time
from .analyses.prediction import crossover_curves, heads_ratio, where_overtakes


def datasheet_constants(path: str, dtype: str = "float32", host: perfmodel.Constants | None = None,
                      threads: int | None = None) -> perfmodel.Constants:
    """The constants of the machine ``path`` describes: a datasheet (``perfmodel.DATASHEET_FIELDS``) or a
    run folder / ``machine.json`` with measured constants (at ``threads``, default its most). A datasheet
    without the host's overheads (views, scopes, module calls, lines, backward nodes) takes them from ``host``
    (the run's own machine, measured), and its notes say so."""
    if os.path.isdir(path):
        path = os.path.join(path, "machine.json")
    sheet = read_json(path)
    name = os.path.basename(os.path.dirname(path)) if os.path.basename(path) == "machine.json" else \
        os.path.basename(path)
    if "constants" in sheet:
        keys = [k for k in sheet["constants"] if k.split("/")[1] == dtype]
        if threads is not None:
            keys = [k for k in keys if k.split("/")[2] == str(threads)]
        if not keys:
            raise ValueError(f"{path}: no measured constants for {dtype}"
                             + (f" at {threads} threads" if threads else "") + f"; it has {list(sheet['constants'])}")
        key = _most_threads(keys)
        c = perfmodel.Constants.measured(sheet["constants"][key])
        c.source = f"predicted from {name}'s measured constants ({key}), not measured on it"
        return c
    c = perfmodel.Constants.datasheet(sheet, name, dtype)
    if host is not None:
        for kind, f in perfmodel.OPTIONAL_OVERHEADS.items():
            if f not in sheet:
                c.overhead[kind] = host.overhead.get(kind, 0.0)
        c.notes = [f"views, scopes, module calls, Python lines and backward nodes cost what they cost on "
                   f"{host.source.removeprefix('measured on ')} (host-side Python and dispatch; not on the datasheet)"]
    c.notes.append("the bytes read from beyond the cache are those of the measured run's machine and cache, read "
                   "there at the datasheet's bandwidth; tanh, softmax and the other pointwise operators at their "
                   "memory traffic")
    return c


def _most_threads(keys) -> str | None:
    """Of ``machine.peak_key`` keys, the one at the most CPU threads (a GPU's ``default`` counts as none)."""
    threads = lambda k: int(k.split("/")[2]) if k.split("/")[2].isdigit() else 0  # noqa: E731
    return max(keys, key=threads, default=None)


def _host(saved: dict) -> perfmodel.Constants | None:
    measured = saved.get("constants") or {}
    key = _most_threads(measured)
    return perfmodel.Constants.measured(measured[key]) if key else None


#: the first columns of the table ``--csv`` writes (``predict_run``)
PREDICTED_COLUMNS = ["area", "method"]


def predict_run(sheet: str, run: str, dtype: str = "float32") -> tuple[pd.DataFrame, perfmodel.Constants]:
    """Each timed case of ``run`` that recorded its operators: measured here, predicted on ``sheet``'s machine."""
    saved, records = tidy.counted(run)
    there = datasheet_constants(sheet, dtype, host=_host(saved))
    rows = []
    for rec in records:
        if rec.get("status") != "ok" or "time_median_s" not in rec or not rec.get("ops"):
            continue
        p = perfmodel.predict([perfmodel.Priced(**op) for op in rec["ops"]], there, rec.get("dispatches"))
        rows.append({"area": rec["area"], "method": rec["method"], **rec["params"], "threads": rec.get("threads"),
                     "measured": rec["time_median_s"], "predicted": p.time_s, "bound": p.bound})
    if not rows:
        raise ValueError(f"{run}: no timed case recorded the operators it executes (a run made before the "
                         "performance model?); measure it again with `attention-bench run`")
    table = pd.DataFrame(rows)
    for column in ("preset", "model", "seq_len", "strategy", "heads", "out_proj", "device"):
        if column not in table:
            table[column] = None
    table["device"] = table.device.fillna("cpu")
    return table, there


def verdicts(table: pd.DataFrame, column: str) -> list[str]:
    """C1's crossover and the heads ratio, from ``column`` (measured or predicted)."""
    out = []
    curves, cross = crossover_curves(table, column)
    if not curves.empty:
        ratios = ", ".join(f"n {int(n)}: {curves.loc[n, 'rnn-width'] / curves.loc[n, 'transformer']:.2f}"
                           for n in curves.index)
        out.append(f"C1, paper-base forward, RNN time / Transformer time: {ratios}; the Transformer overtakes "
                   + where_overtakes(cross, curves))
    heads, h = heads_ratio(table, column)
    if not heads.empty:
        out.append(f"{h} heads / 1 head at equal FLOPs: " + ", ".join(f"{s} {fmt_ratio(r)}" for s, r in heads.items()))
    return out


def _value(x) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def report(table: pd.DataFrame, there: perfmodel.Constants, run: str) -> str:
    """The lines ``attention-bench predict`` prints: every case labelled predicted, then the verdicts."""
    label = there.source
    lines = [f"# {label}", f"# cases: {run} (its operators; 'here' is what that run measured)"]
    lines += [f"# note: {n}" for n in there.notes]
    for _, r in table.sort_values(["area", "method"]).iterrows():
        axes = ", ".join(f"{k} {_value(r[k])}" for k in tidy.PARAMS if k in r and pd.notna(r[k]) and k != "device")
        lines.append(f"{r['area']} {r['method']} ({axes}): predicted {fmt_time(r['predicted'])} there "
                     f"({r['bound']}-bound), measured {fmt_time(r['measured'])} here — predicted, not measured")
    lines += [f"predicted, not measured: {v}" for v in verdicts(table, "predicted")]
    lines += [f"measured here: {v}" for v in verdicts(table, "measured")]
    return "\n".join(lines)


def summary(table: pd.DataFrame, there: perfmodel.Constants, sheet: str, run: str) -> dict:
    """What a saved record of a prediction keeps (``attention-bench predict --record``)."""
    speedup = table.measured / table.predicted
    return {"sheet": sheet, "run": run, "source": there.source, "notes": there.notes, "cases": len(table),
            "speedup_median": float(speedup.median()), "speedup_min": float(speedup.min()),
            "speedup_max": float(speedup.max()), "bounds": table.bound.value_counts().to_dict(),
            "predicted": verdicts(table, "predicted"), "measured": verdicts(table, "measured")}


#: how far (a factor, at the median case) a run's own constants may predict its own cases before every
#: prediction made from them is said to carry that error
SELF_CHECK_FACTOR = 3.0


def own_factor(run: str) -> float | None:
    """How many times its measured time ``run``'s own constants predict its cases, at the median case; None
    where nothing is both timed and predicted."""
    t = tidy.load([run])
    ok = t[(t.status == "ok") & t.metric.isin(["time", "predicted_time"])]
    keys = ["area", "method", *[c for c in tidy.PARAMS if c in ok and ok[c].notna().any()]]
    wide = ok.assign(**{k: ok[k].astype(object).where(ok[k].notna(), "") for k in keys}).pivot_table(
        index=keys, columns="metric", values="value", aggfunc="median")
    if not {"time", "predicted_time"} <= set(wide) or wide.dropna().empty:
        return None
    return float((wide.predicted_time / wide.time).dropna().median())


def self_check(run: str) -> str | None:
    """A warning when ``run``'s own measured constants predict its own cases more than SELF_CHECK_FACTOR off
    at the median (constants measured in other conditions than the cases: a busy machine, say), else None."""
    factor = own_factor(run)
    if factor is None or 1 / SELF_CHECK_FACTOR <= factor <= SELF_CHECK_FACTOR:
        return None
    return (f"{run}'s own constants predict its own cases {factor:.3g}x their measured time at the median case: "
            "they were measured in other conditions than its cases (a busy machine?). Every figure predicted from "
            "them, the host costs carried onto another machine included, carries that error: measure the run "
            "again on a quiet machine")


def main(sheet: str, run: str, csv: str | None = None, dtype: str = "float32") -> tuple[str, dict]:
    """The lines to print and the record's fields."""
    if csv:
        columns.check_csv_path(csv, PREDICTED_COLUMNS, "--csv")
    table, there = predict_run(sheet, run, dtype)
    warning = self_check(run)
    if warning:
        there.notes.insert(0, "WARNING: " + warning)
    if csv:
        columns.write_csv(table.assign(label=there.source), csv, "--csv")
    return report(table, there, run), {**summary(table, there, sheet, run), "warning": warning}
