"""Which rows are one run: each machine's analyses read its latest run only, never two runs pooled."""

from __future__ import annotations

import pandas as pd

from benchmarks.core import records
from benchmarks.core.hardware.machine import BUSY_SHARE

from .base import case_columns


def run_key(t: pd.DataFrame) -> pd.Series:
    """Each row's run: the ``run`` column (a runner folder, or an asv commit and environment); tables built
    without it fall back to (commit, environment)."""
    if "run" in t and t.run.notna().all():
        return t.run
    return t.commit.astype(object).fillna("no commit").astype(str) + " " + t.env.astype(object).fillna("").astype(str)


def latest_run(t: pd.DataFrame):
    """The label of the run measured last (by its latest case), or None for an empty table. A run without
    a commit is still a run: it is told apart by its folder, never dropped."""
    if t.empty:
        return None
    dates = t.date.groupby(run_key(t), sort=False, dropna=False).max()
    return dates.index[-1] if dates.isna().all() else dates.idxmax()


def latest(t: pd.DataFrame) -> pd.DataFrame:
    """The rows of one machine's latest run. asv's results hold every commit, and two runner folders of one
    machine (say a quick and a default grid) are two runs: an analysis must not pool them."""
    run = latest_run(t)
    return t if run is None else t[run_key(t) == run]


def one_machine_per_run(t: pd.DataFrame) -> pd.DataFrame:
    """The table with each run as its own machine: a machine with several runs is relabelled
    "machine [run]", so that a comparison sets them side by side instead of keeping only the latest."""
    keys = run_key(t)
    several = t.groupby("machine").apply(lambda g: keys[g.index].nunique() > 1, include_groups=False)
    relabel = t.machine.map(several).fillna(False).astype(bool)
    return t.assign(machine=t.machine.where(~relabel, t.machine + " [" + keys + "]"))


def memory_limits(t: pd.DataFrame) -> pd.DataFrame:
    """Where memory ran out: every out-of-memory case with its parameters, next to the largest sequence
    length measured on the same machine, area and device (the limit lies between the two)."""
    timed = t[t.metric == "time"]
    oom = timed[timed.status == "oom"]
    if oom.empty:
        return pd.DataFrame()
    ok = timed[timed.status == "ok"]
    largest = ok.groupby(["machine", "area", ok.device.fillna("cpu")]).seq_len.max()
    fits = [largest.get((m, a, d if isinstance(d, str) else "cpu"), pd.NA)
            for m, a, d in zip(oom.machine, oom.area, oom.device, strict=True)]
    return case_columns(oom.assign(largest_n_measured=fits), "largest_n_measured", "reason")


def table(t: pd.DataFrame) -> pd.DataFrame:
    """One row per run: machine, source, commit (or why there is none), environment, when, its rounds (and
    ``incomplete``: timed cases with fewer rounds than the run planned, a run cut short), how busy the machine
    was (``others_cpu``: the median and largest share of the cores other processes used while its CPU cases
    were timed; ``busy_cases``: cases timed while others used more than BUSY_SHARE), how fast the host let its
    cores go (``control_gemm``: the control GEMM's median rate over its CPU cases, per thread count: lower where
    the host ran something else on them, which the other two do not show inside a VM) and its cases by status."""
    timed = t[t.metric.isin(["time", "sequential_depth"])]
    status = timed.groupby(["run", "status"]).size().unstack("status", fill_value=0)
    out = t.groupby("run", sort=False).agg(machine=("machine", "first"), source=("source", "first"),
                                          commit=("commit", "first"), commit_error=("commit_error", "first"),
                                          env=("env", "first"), first=("date", "min"), last=("finished", "max"),
                                          rounds=("rounds", "max"), rounds_planned=("rounds_planned", "max"),
                                          runtime=("runtime", "first"))
    out["commit"] = [records.short(c) if isinstance(c, str) else f"none: {e}"
                     for c, e in zip(out.commit, out.commit_error, strict=True)]
    ok = timed[timed.status == "ok"]
    out["incomplete"] = (ok.rounds < ok.rounds_planned).fillna(False).groupby(ok.run).sum().reindex(
        out.index, fill_value=0).astype(int)
    others = t[(t.metric == "others_cpu_share") & (t.status == "ok")].groupby("run").value
    out["others_cpu"] = [f"median {others.median()[r]:.0%}, max {others.max()[r]:.0%}"
                         if r in others.groups else None for r in out.index]
    out["busy_cases"] = (others.apply(lambda v: (v > BUSY_SHARE).sum())).reindex(out.index).astype("Int64")
    controls = t[(t.metric == "control_flops_per_s") & (t.status == "ok")].groupby(["run", "threads"]).value.median()
    out["control_gemm"] = [", ".join(f"{v / 1e9:.0f} GFLOP/s on {int(n)} thread{'' if int(n) == 1 else 's'}"
                                     for n, v in controls[r].items()) if r in controls.index.get_level_values(0)
                           else None for r in out.index]
    out = out.drop(columns="commit_error").join(status).fillna({s: 0 for s in status.columns})
    return out
