"""The same cases on several machines: time ratios against the first, raw and per GEMM peak."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import tidy
from .base import Analysis


def analyse(t: pd.DataFrame) -> Analysis:
    """The same cases on several machines as time ratios against the first machine, raw and normalised by
    each machine's GEMM peak (a ratio near 1 after normalising means the gap is the GEMM peak's gap)."""
    machines = list(dict.fromkeys(t.machine.dropna()))
    a = Analysis("hardware", "The same cases on several machines", "Hardware", "")
    if len(machines) < 2:
        return a.without("a second machine's results", (
            f"Only one machine ({machines[0] if machines else 'none'}) in these results. To compare, measure on "
            "another machine (attention-bench run --machine <name>: its run folder is results/runs/<name>-default) and "
            "build the report from both folders: attention-bench report results/runs/<a> results/runs/<b>."))
    base = machines[0]
    times = t[(t.metric == "time") & (t.status == "ok") & (t.area != "gemm")].dropna(subset=["value"])
    times = times.assign(device=times.device.fillna("cpu"), run_threads=times.threads)
    # the thread count a case ran on is the machine's, except where it is the case's own axis
    times.loc[times.area != "threads", "threads"] = pd.NA
    times["peak"] = _peaks_for(t, times)
    params = [c for c in tidy.PARAMS if c in times and times[c].notna().any()]
    key = ["area", "method", *params]
    grouped = times.groupby(key + ["machine"], dropna=False)
    wide = grouped.value.median().unstack("machine").dropna(subset=machines, how="any")
    peak = grouped.peak.first().unstack("machine").reindex(wide.index)
    if wide.empty:
        return a.without("common cases", f"The machines {machines} share no measured case; run the same grid on each.")
    predicted = t[(t.metric == "predicted_time") & (t.status == "ok")].dropna(subset=["value"])
    predicted = predicted.assign(device=predicted.device.fillna("cpu"))
    predicted.loc[predicted.area != "threads", "threads"] = pd.NA
    pred_wide = (predicted.groupby(key + ["machine"], dropna=False).value.median().unstack("machine")
                 .reindex(wide.index) if not predicted.empty else pd.DataFrame(index=wide.index))
    rows = []
    for m in machines[1:]:
        raw = wide[base] / wide[m]  # > 1: m is faster
        # the speed-up divided by the ratio of the GEMM peaks each case ran under: 1.0 means "exactly as much
        # faster as its GEMM peak"
        per_peak = raw * peak[base] / peak[m]
        rows.append({"machine": m, "baseline": base, "cases": len(raw), "median_speedup": float(raw.median()),
                     "min_speedup": float(raw.min()), "max_speedup": float(raw.max()),
                     "median_speedup_per_peak": float(per_peak.median())})
        a.numbers[f"median_speedup_{m}"] = float(raw.median())
        a.numbers[f"median_speedup_per_peak_{m}"] = float(per_peak.median())
        if {base, m} <= set(pred_wide.columns):  # what each machine's own constants predict for the same cases
            both = (pred_wide[base] / pred_wide[m]).dropna()
            if not both.empty:
                rows[-1]["median_predicted_speedup"] = float(both.median())
                measured_log = np.log(raw.median())
                # the share of the measured gap (in log) the constants predict; 1: they explain all of it
                rows[-1]["explained"] = (float(np.log(both.median()) / measured_log) if abs(measured_log) > 0.05
                                         else float("nan"))
                a.numbers[f"median_predicted_speedup_{m}"] = float(both.median())
    a.tables["speedup"] = pd.DataFrame(rows)
    a.answer = " ".join(f"{r['machine']} runs the {r['cases']} common cases {r['median_speedup']:.2f}× as fast as "
                        f"{base} ({r['median_speedup_per_peak']:.2f}× per GEMM peak)." for r in rows)
    a.tables["times"] = wide
    a.plot("speedup", table=a.tables["speedup"].set_index("machine")[["median_speedup", "median_speedup_per_peak"]]
           .rename(columns={"median_speedup": "raw", "median_speedup_per_peak": "per GEMM peak"}), kind="bars",
           ylabel=f"median speed-up over {base} (×)", title="Machines compared on the same cases", hline=(1.0, ""))
    a.units = {"speedup": "× relative to the baseline machine", "times": "seconds per call (median)"}
    a.verdict = " ".join(f"{r['machine']} runs the {r['cases']} common cases {r['median_speedup']:.2f}× as fast as "
                         f"{base} (median; {r['min_speedup']:.2f}–{r['max_speedup']:.2f}×), "
                         f"{r['median_speedup_per_peak']:.2f}× after dividing by the ratio of the machines' GEMM "
                         f"peaks." + _predicted(r) for r in rows)
    return a


def _predicted(r: dict) -> str:
    """The sentence on what the machines' measured constants predict for the same gap, if both have them."""
    if "median_predicted_speedup" not in r:
        return ""
    share = r.get("explained")
    return (" From each machine's measured constants the performance model predicts "
            f"{r['median_predicted_speedup']:.2f}×"
            + (f": the constants explain {share:.0%} of the gap (in log)." if share == share else "."))


def _peaks_for(t: pd.DataFrame, times: pd.DataFrame) -> pd.Series:
    """For each timed row, its machine's float32 GEMM peak on its device at the thread count it ran on
    (the best over thread counts where that one was not calibrated; GPUs have one peak)."""
    p = t[(t.metric == "gemm_peak_flops_per_s") & (t.dtype == "float32")]
    p = p.assign(device=p.device.fillna("cpu"))
    exact = p.groupby(["machine", "device", "threads"]).value.max()
    best = p.groupby(["machine", "device"]).value.max()
    out = []
    for m, d, n in zip(times.machine, times.device, times.run_threads, strict=True):
        key = (m, d, n)
        out.append(exact[key] if d == "cpu" and not pd.isna(n) and key in exact.index else best.get((m, d), np.nan))
    return pd.Series(out, index=times.index, dtype=float)

