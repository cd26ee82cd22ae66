"""Where the time goes: the profiles' component breakdowns as tables and a verdict (pure, like analyses).

Profiles are the records ``attention-bench profile`` writes (``<run>/profiles/<case>/profile.json``).
``table(records)`` gives one row per case and component; ``case_table`` one row per case; the
analyses read them: the breakdown itself, why the Transformer and the RNN trade places (C1), and which
component's time grows with the head count (C3/C4).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.core.profiling.profiler import SUM_TOLERANCE
from benchmarks.core.timing import rerun

from ..columns import runtime
from .base import Analysis, conditions

#: resamples of the profiled cases behind the median overhead's interval
BOOTSTRAP = 1000
CASE_COLUMNS = ["case", "area", "method", "device", "threads", "unprofiled_s", "profiled_s", "overhead",
                "components_total_s", "sum_over_unprofiled", "sum_within_tolerance", "flops_match_analytic",
                "sequential_depth", "op_launches", "peak_bytes", "folder", "trace", "memory_figure", "commit"]


def table(records: list[dict]) -> pd.DataFrame:
    """One row per profiled case and component, with the case's parameters and facts."""
    rows = []
    for r in records:
        case = {k: r.get(k) for k in CASE_COLUMNS if k in r}
        case.update({k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in r["params"].items()})
        case["case"] = r.get("folder", "").split("/")[-1]
        case["dtype"] = r.get("dtype") or r["params"].get("dtype")
        case["runtime"] = runtime(r.get("regime") or r.get("run_regime"))  # its own, else its run's
        case["matmul_share"] = sum(c["share"] for c in r["components"] if c["matmul_component"])
        for c in r["components"]:
            rows.append({**case, **c, "memory_held_bytes": r["memory_by_component"].get(c["component"], 0)})
    return pd.DataFrame(rows)


def case_table(t: pd.DataFrame) -> pd.DataFrame:
    """One row per profiled case."""
    if t.empty:
        return t
    return t.drop_duplicates("case").drop(columns=["component", "time_s", "share", "calls", "launches",
                                                   "analytic_matmul_flops", "counted_matmul_flops",
                                                   "achieved_flops_per_s", "matmul_component",
                                                   "memory_held_bytes"]).reset_index(drop=True)


def _describe(r) -> str:
    params = {k: r[k] for k in ("model", "preset", "seq_len", "batch", "heads", "strategy", "backend")
              if k in r and r[k] == r[k] and r[k] is not None}
    return " ".join(f"{v}" if k in ("model", "preset", "strategy", "backend") else f"{k} {int(v)}"
                    for k, v in params.items())


def analyse(t: pd.DataFrame) -> Analysis:
    """The breakdowns: time share per component of every profiled case, the checks, the traces."""
    a = Analysis("profiling", "Where the time goes: profiles in the paper's components", "Profiling", "")
    if t.empty:
        return a.without("no profiles", "No profiles: run attention-bench profile --set default --out <run "
                                        "folder> (the main command does).")
    cases = case_table(t)
    cases["label"] = [f"{r.area}: {_describe(r)}" for _, r in cases.iterrows()]
    shares = t.assign(label=t.case.map(dict(zip(cases.case, cases.label, strict=True)))).pivot_table(
        index="label", columns="component", values="share", aggfunc="sum", fill_value=0.0)
    for area in cases.area.unique():
        labels = cases[cases.area == area].label
        part = shares.loc[shares.index.isin(labels)]
        a.tables[f"shares_{area}"] = part.loc[:, (part > 0).any()]
        a.plot(f"shares_{area}", kind="shares", title=f"Time share per component: {area}",
               xlabel="share of the profiled call's time")
    checks = cases.set_index("label")[["unprofiled_s", "profiled_s", "overhead", "sum_over_unprofiled",
                                       "flops_match_analytic", "sequential_depth", "op_launches", "peak_bytes"]]
    a.tables["checks"] = checks
    a.tables["links"] = cases.set_index("label")[["folder", "trace", "memory_figure"]]
    a.units = {name: "share of the profiled call's time" for name in a.tables}
    a.units.update(checks="seconds; overhead = profiled/unprofiled − 1; peak in bytes",
                   links="files under the report folder")
    within = int(cases.sum_within_tolerance.sum())
    match = int(cases.flops_match_analytic.sum())
    slowdown = 1 + cases.overhead.to_numpy(dtype=float)  # profiled / unprofiled: positive, so it has a log
    a.numbers.update(profiles=len(cases), sum_within_tolerance=within, flops_match=match,
                     profiled_over_unprofiled=float(np.median(slowdown)), max_overhead=float(cases.overhead.max()))
    if len(cases) > 1:  # which cases and each one's noise: the median's bootstrap over the profiled cases
        a.interval("profiled_over_unprofiled", *rerun.from_draws(a.numbers["profiled_over_unprofiled"], np.median(
            np.random.default_rng(0).choice(slowdown, (BOOTSTRAP, len(slowdown))), axis=1)))
        a.caps["sum_within_tolerance"] = len(cases)  # a count of them: never more
        a.interval("sum_within_tolerance", *rerun.count_interval(within, len(cases)))
    worst = cases.loc[cases.overhead.idxmax()]
    sentences = [f"{len(cases)} cases profiled on {'/'.join(sorted(cases.device.unique()))} "
                 f"({'/'.join(str(int(x)) for x in sorted(cases.threads.dropna().unique()))} CPU threads). "
                 f"Component matmul FLOPs equal the analytic model in {match} of {len(cases)}; the components sum "
                 f"to within {SUM_TOLERANCE:.0%} of the unprofiled call in {within} of {len(cases)}. The profiler's "
                 f"overhead is {_overhead(a)} at the median and {worst.overhead:+.0%} at worst "
                 f"({worst.label}, {worst.op_launches} launches); a component's time includes its share of it."]
    for _, r in cases.iterrows():
        comps = t[t.case == r.case].sort_values("share", ascending=False)
        top = ", ".join(f"{c.component} {c.share:.0%}" for c in comps.head(3).itertuples())
        a.numbers[f"matmul_share {r.label}"] = r.matmul_share
        if r.area == "models":
            sentences.append(f"{r.label}: {top}; matmul components {r.matmul_share:.0%}.")
    a.verdict = " ".join(sentences)
    a.quoted = ["profiles", "flops_match", "sum_within_tolerance", "profiled_over_unprofiled"]
    counted = a.intervals.get("sum_within_tolerance")
    a.answer = (f"{len(cases)} cases profiled: component FLOPs equal the model in {match}, components sum to within "
                f"{SUM_TOLERANCE:.0%} of the call in {within}"
                + (f" ({counted[0]:.0f}-{counted[1]:.0f})" if counted else "")
                + f"; median profiler overhead {_overhead(a)}.")
    a.conditions = f"{conditions(cases, n=False)}; each bar names its case"
    return a


def _overhead(a: Analysis) -> str:
    """The profiler's median overhead, signed, with its interval where there is one: '+1% (-1% to +3%)'."""
    said = f"{a.numbers['profiled_over_unprofiled'] - 1:+.0%}".replace("-0%", "+0%")
    if "profiled_over_unprofiled" in a.intervals:
        low, high = a.intervals["profiled_over_unprofiled"]
        said += f" ({low - 1:+.0%} to {high - 1:+.0%})"
    return said


def heads_explained(t: pd.DataFrame) -> tuple[list[str], pd.DataFrame]:
    """C3/C4: per strategy, each component's time at the fewest and the most heads profiled: which grows."""
    m = t[(t.area == "multihead")] if not t.empty else t
    if m.empty or m.heads.nunique() < 2:
        return [], pd.DataFrame()
    rows, sentences = [], []
    for strategy, g in m.groupby("strategy"):
        lo, hi = int(g.heads.min()), int(g.heads.max())
        times = g.pivot_table(index="component", columns="heads", values="time_s", aggfunc="sum", fill_value=0.0)
        launches = g.pivot_table(index="component", columns="heads", values="launches", aggfunc="sum", fill_value=0)
        held = g.pivot_table(index="component", columns="heads", values="memory_held_bytes", aggfunc="sum",
                             fill_value=0)
        total_lo, total_hi = times[lo].sum(), times[hi].sum()
        for comp in times.index:
            rows.append({"strategy": strategy, "component": comp, f"time_h{lo}_s": times.loc[comp, lo],
                         f"time_h{hi}_s": times.loc[comp, hi], "added_s": times.loc[comp, hi] - times.loc[comp, lo],
                         f"launches_h{lo}": launches.loc[comp, lo], f"launches_h{hi}": launches.loc[comp, hi],
                         f"memory_at_peak_h{hi}_bytes": held.loc[comp, hi]})
        added = times[hi] - times[lo]
        grew = added[added > 0.05 * abs(total_hi - total_lo)].sort_values(ascending=False)  # beyond noise
        flat = [c for c in times.index if abs(added[c]) <= 0.1 * max(times.loc[c, lo], 1e-12)]
        change = total_hi - total_lo
        if change > 0 and len(grew):
            parts = ", ".join(f"{c} +{_ms(grew[c])} ({launches.loc[c, lo]}→{launches.loc[c, hi]} launches)"
                              for c in grew.index[:3])
            sentences.append(f"{strategy}: the call goes from {_ms(total_lo)} at h = {lo} to {_ms(total_hi)} at "
                             f"h = {hi}; the growth is {parts}"
                             + (f"; flat: {', '.join(flat)}" if flat else "") + ".")
        else:
            sentences.append(f"{strategy}: {_ms(total_lo)} at h = {lo}, {_ms(total_hi)} at h = {hi}: no component "
                             f"grows with h beyond noise.")
    return sentences, pd.DataFrame(rows)


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g} ms"
