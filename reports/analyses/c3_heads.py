"""C3/C4: one large attention against many small heads at fixed d_model: FLOPs, memory and time against h,
and what W_O costs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from benchmarks import cases
from benchmarks.core.timing import rerun

from .base import Analysis, conditions, devices, gpu_missing, heads_axis, not_measured, ok_rows, time_curves
from .profiling import heads_explained
from .spread import ratio_interval

#: a correlation at least this strong counts as "time tracks the work" in a verdict
TRACKS = 0.8


def score_bytes(heads: int, dtype_bytes: int = 4) -> int:
    """Bytes of the (batch, h, n, n) score matrix that the batched strategy materialises."""
    s = cases.MULTIHEAD_SHAPE
    return s["batch"] * heads * s["seq_len"] ** 2 * dtype_bytes


def analyse(t: pd.DataFrame, profiles: pd.DataFrame | None = None) -> Analysis:
    """C3/C4: one large attention vs many small heads at fixed d_model: FLOPs, memory and time vs h."""
    flops_rows = ok_rows(t, "multihead", "matmul_flops")
    times = ok_rows(t, "multihead", "time")
    a = Analysis("c3_heads", "One large attention vs many small heads", "C3/C4", "",
                 missing=gpu_missing(t, "multihead"))
    if flops_rows.empty or times.empty:
        return a.without("no multihead results", not_measured(t, "multihead", "multi-head"))
    with_wo = flops_rows[flops_rows.out_proj.astype(bool)]
    f = with_wo.groupby("heads").value.median()
    other = ok_rows(t, "multihead", "other_flops")
    work = pd.DataFrame({"matmul_flops": f})
    if not other.empty:
        work["other_flops"] = other[other.out_proj.astype(bool)].groupby("heads").value.median()
    work["score_bytes"] = [score_bytes(int(h)) for h in work.index]
    a.tables["work"] = work
    a.plot("work", table=work.rename(columns={"matmul_flops": "matmul FLOPs", "other_flops": "non-matmul FLOPs",
                                              "score_bytes": "score matrix bytes"}),
           xlabel=heads_axis(), ylabel="FLOPs per call / bytes", title="Work and score memory vs heads",
           log_x=True, log_y=True)
    flat = f.max() / f.min()
    a.numbers["matmul_flops_max_over_min"] = flat
    device = devices(times)[0]
    tt = times[(times.device == device) & times.out_proj.astype(bool)]
    curves, interval = time_curves(tt, "heads", "strategy")
    a.tables[f"time_{device}"] = curves
    a.plot(f"time_{device}", xlabel=heads_axis(), ylabel="forward time (ms)", title="Time vs heads per strategy",
           scale=1e3, **interval)
    h_lo, h_hi = int(curves.index.min()), int(curves.index.max())
    spreads = (curves.loc[h_hi] / curves.loc[h_lo]).to_dict()
    for s, r in spreads.items():
        a.numbers[f"time_ratio_h{h_hi}_over_h{h_lo}_{s}"] = r
    ranges = {}  # each ratio's interval: where a rerun's ratio lands
    if interval:
        low, high = interval["low"], interval["high"]
        ranges = {s: span for s in spreads if not pd.isna((span := ratio_interval(
            (curves.loc[h_lo, s], low.loc[h_lo, s], high.loc[h_lo, s]),
            (curves.loc[h_hi, s], low.loc[h_hi, s], high.loc[h_hi, s])))[0])}
        a.tables["time_ratios"] = pd.DataFrame([{"strategy": s, "ratio": spreads[s], "low": lo, "high": hi}
                                                for s, (lo, hi) in ranges.items()])
        ranges = {s: a.interval(f"time_ratio_h{h_hi}_over_h{h_lo}_{s}", *span) for s, span in ranges.items()}
    told = {s: f"{r:.2f}× ({s}" + (f", {ranges[s][0]:.2f}-{ranges[s][1]:.2f}" if s in ranges else "") + ")"
            for s, r in spreads.items()}
    same = "holds" if flat < 1.0 + 1e-9 else "does not hold"
    s = cases.MULTIHEAD_SHAPE
    sentences = [f"Multi-head attention at batch {s['batch']}, n = {s['seq_len']}, d_model {s['d_model']}, "
                 f"{conditions(tt, n=False)}. Matmul FLOPs vs h: max/min = {flat:.4f} over h = {h_lo}..{h_hi}, so "
                 f"“same FLOPs” {same} for the matmuls."]
    if "other_flops" in work:
        sentences.append(f"Non-matmul work grows {work.other_flops.max() / work.other_flops.min():.1f}× and the "
                         f"score matrix {work.score_bytes.max() / work.score_bytes.min():.0f}× "
                         f"({work.score_bytes.min() / 2**20:.0f} → {work.score_bytes.max() / 2**20:.0f} MiB).")
    sentences.append(f"Yet time on {device} from h = {h_lo} to {h_hi} changes by " + ", ".join(told.values())
                     + (f" (each with the {rerun.CONFIDENCE:.0%} interval where a rerun's ratio lands, from the "
                        "processes its times were measured in)" if ranges else "") + ".")
    if "batched" in curves and "other_flops" in work and len(curves) > 2:
        # why: does the batched strategy's time track the work that grows with h (the h·n² scores)?
        joined = pd.concat([curves["batched"], work.score_bytes], axis=1).dropna()
        with np.errstate(invalid="ignore", divide="ignore"):  # a flat time has no correlation: r is nan
            r = float(np.corrcoef(np.log(joined.iloc[:, 0]), np.log(joined.score_bytes))[0, 1])
        a.numbers["corr_log_time_log_score_bytes_batched"] = r
        if r >= TRACKS:
            sentences.append(f"Why: the batched strategy's time tracks the work that grows with h, the h·n² score "
                             f"matrix and its softmax, not the flat matmuls (correlation of log time with log "
                             f"score-matrix size r = {r:.2f}).")
        else:
            sentences.append(f"The batched strategy's time does not track the score-matrix size (r = {r:.2f}), so "
                             f"these measurements do not say why it changes with h.")
        least = min(spreads, key=lambda k: abs(math.log(spreads[k])))
        a.numbers["least_changing_strategy_ratio"] = spreads[least]
        sentences.append(f"The strategy whose time changes least with h is {least} ({spreads[least]:.2f}×).")
    if profiles is not None and not profiles.empty:
        explained, by_component = heads_explained(profiles)
        if explained:
            a.tables["components_vs_heads"] = by_component
            sentences.append("Component by component, from the profiles: " + " ".join(explained))
    wo = times[(times.device == device) & (times.strategy == "batched")]
    if wo.out_proj.nunique() == 2:
        w = wo.groupby(["heads", "out_proj"]).value.median().unstack("out_proj")
        w.columns = ["without W_O" if not c else "with W_O" for c in w.columns]
        w["W_O cost"] = w["with W_O"] / w["without W_O"]
        a.tables[f"wo_{device}"] = w
        a.plot(f"wo_{device}", table=w[["with W_O", "without W_O"]], xlabel="heads h", ylabel="forward time (ms)",
               title="With and without W_O", scale=1e3)
        a.numbers["wo_time_ratio_median"] = float(w["W_O cost"].median())
        fw = flops_rows.groupby("out_proj").value.median()
        a.numbers["wo_flops_ratio"] = fw[True] / fw[False]
        sentences.append(f"W_O adds {fw[True] / fw[False] - 1:.0%} of the matmul FLOPs and "
                         f"{w['W_O cost'].median() - 1:.0%} of the time (median over h, batched).")
    a.verdict = " ".join(sentences)
    a.quoted = ["matmul_flops_max_over_min"] + [f"time_ratio_h{h_hi}_over_h{h_lo}_{s}" for s in told]
    a.answer = (f"Matmul FLOPs equal at every h (max/min {flat:.4f}), yet h = {h_hi} takes "
                + ", ".join(told.values()) + f" the time of h = {h_lo}.")
    a.conditions = f"batch {s['batch']}, n {s['seq_len']}, d_model {s['d_model']}, {conditions(tt, n=False)}"
    return a

