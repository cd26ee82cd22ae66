"""The report's analyses, in the order the page shows them, and running them on one machine's latest run."""

from __future__ import annotations

import pandas as pd

from .. import tidy
from . import (
    base,
    c1_depth,
    c1_generation,
    c1_length,
    c1_threads,
    c2_roofline,
    c3_heads,
    c3_parallel,
    c5_scaling,
    hardware,
    paired,
    prediction,
    profiling,
    table1,
)
from .base import Analysis
from .runs import latest


def _profiles_only(t: pd.DataFrame, profiles: pd.DataFrame) -> Analysis:
    return profiling.analyse(profiles)


def _computed(t: pd.DataFrame) -> Analysis:
    return c5_scaling.analyse()


def _pairs_only(t: pd.DataFrame, pairs: list[dict]) -> Analysis:
    return paired.analyse(pairs)


#: every per-machine analysis in the report's order (each module's ``analyse``; its key is the module's name), and
#: what else it reads: None (the table only), "profiles" (the profile table) or "pairs" (the paired-ratio records)
ANALYSES = [(c1_length.analyse, "profiles"), (c1_generation.analyse, None), (c1_depth.analyse, None),
            (c1_threads.analyse, None), (c2_roofline.analyse, None), (c3_heads.analyse, "profiles"),
            (_pairs_only, "pairs"), (c3_parallel.analyse, None), (_computed, None), (table1.analyse, None),
            (prediction.analyse, None), (_profiles_only, "profiles")]


def run_all(t: pd.DataFrame, machine: str | None = None, profiles: pd.DataFrame | None = None,
            pairs: list[dict] | None = None, between: bool = True) -> list[Analysis]:
    """Every per-machine analysis on ``machine`` (default: the first in the table), then the comparison.
    ``profiles`` is ``reports.analyses.profiling.table`` of that machine's profile records (empty: none);
    ``pairs`` its paired-ratio records (``reports.tidy.load_pairs``). The intervals add the variance between the
    machine's runs that its analysed run's ``machine.json`` holds (``base.BETWEEN``), unless ``between`` is False
    (the run's own intervals, from which ``reports.reproduce`` measures that variance)."""
    machines = list(dict.fromkeys(t.machine.dropna()))
    if machine is not None and machine not in machines:
        raise ValueError(f"unknown machine {machine!r}; the results have {machines}")
    one = latest(t[t.machine == (machine or (machines[0] if machines else None))])
    inputs = {"profiles": pd.DataFrame() if profiles is None else profiles, "pairs": pairs or []}
    runs = one[one.source == "runner"].run.dropna().unique() if "source" in one else []
    token = base.BETWEEN.set(tidy.between_of_run(runs[0]) if between and len(runs) else {})
    try:
        out = [f(one, inputs[reads]) if reads else f(one) for f, reads in ANALYSES]
        by_key = {a.key: a for a in out}
        hands_back = "free_page_reporting" in one and bool(one.free_page_reporting.eq(True).any())
        paired.reconcile(by_key["c1_length"], by_key["c3_heads"], by_key["paired"], inputs["pairs"],  # one answer
                         by_key["c2_roofline"], hands_back)
    finally:
        base.BETWEEN.reset(token)
    return out + [hardware.analyse(pd.concat([latest(t[t.machine == m]) for m in machines]) if machines else t)]
