"""The report's analyses, in the order the page shows them, and running them on one machine's latest run."""

from __future__ import annotations

import pandas as pd

from .base import Analysis
from .c1_depth import analyse_depth
from .c1_generation import analyse_generation
from .c1_length import analyse_sequence_length
from .c1_threads import analyse_threads
from .c2_roofline import analyse_roofline
from .hardware import analyse_hardware
from .heads import analyse_heads
from .paired import analyse_paired, reconcile
from .parallel import analyse_parallel
from .prediction import analyse_prediction
from .profiling import analyse_profiles
from .runs import latest
from .softmax_scale import analyse_softmax_scaling
from .table1 import analyse_table1


def _profiles_only(t: pd.DataFrame, profiles: pd.DataFrame) -> Analysis:
    return analyse_profiles(profiles)


def _computed(t: pd.DataFrame) -> Analysis:
    return analyse_softmax_scaling()


def _pairs_only(t: pd.DataFrame, pairs: list[dict]) -> Analysis:
    return analyse_paired(pairs)


#: every per-machine analysis in the report's order, and what else it reads: None (the table only),
#: "profiles" (the profile table) or "pairs" (the paired-ratio records)
ANALYSES = [(analyse_sequence_length, "profiles"), (analyse_generation, None), (analyse_depth, None),
            (analyse_threads, None), (analyse_roofline, None), (analyse_heads, "profiles"), (_pairs_only, "pairs"),
            (analyse_parallel, None), (_computed, None), (analyse_table1, None), (analyse_prediction, None),
            (_profiles_only, "profiles")]


def run_all(t: pd.DataFrame, machine: str | None = None, profiles: pd.DataFrame | None = None,
            pairs: list[dict] | None = None) -> list[Analysis]:
    """Every per-machine analysis on ``machine`` (default: the first in the table), then the comparison.
    ``profiles`` is ``reports.analyses.profiling.table`` of that machine's profile records (empty: none);
    ``pairs`` its paired-ratio records (``reports.tidy.load_pairs``)."""
    machines = list(dict.fromkeys(t.machine.dropna()))
    if machine is not None and machine not in machines:
        raise ValueError(f"unknown machine {machine!r}; the results have {machines}")
    one = latest(t[t.machine == (machine or (machines[0] if machines else None))])
    inputs = {"profiles": pd.DataFrame() if profiles is None else profiles, "pairs": pairs or []}
    out = [f(one, inputs[reads]) if reads else f(one) for f, reads in ANALYSES]
    by_key = {a.key: a for a in out}
    reconcile(by_key["c1_length"], by_key["c3_heads"], by_key["paired"], inputs["pairs"])  # one answer per ratio
    return out + [analyse_hardware(pd.concat([latest(t[t.machine == m]) for m in machines]) if machines else t)]
