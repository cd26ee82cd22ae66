"""C2: achieved matmul FLOP/s of equation (1) per backend against the machine's measured GEMM peak, and the
full roofline: each attention and multi-head case placed by its arithmetic intensity (matmul FLOPs over the
bytes its operators read and write) under both ceilings, the GEMM peak and bandwidth x intensity."""

from __future__ import annotations

import math

import pandas as pd

from benchmarks import cases

from .base import Analysis, conditions, devices, gpu_missing, hold_axes, not_measured, ok_rows, span, time_curves


def analyse(t: pd.DataFrame) -> Analysis:
    """C2: achieved matmul FLOP/s of equation (1) per backend against the machine's GEMM peak."""
    rows, held = hold_axes(_achieved(t), {"causal": False, "d_head": None, "dtype": "float32"})
    a = Analysis("c2_roofline", "Achieved FLOP/s against the measured GEMM peak", "C2", "",
                 missing=gpu_missing(t, "attention"))
    if rows.empty:
        return a.without("no achieved_flops_per_s", not_measured(t, "attention", "attention FLOP/s"))
    sentences = []
    for device in devices(rows):
        d = rows[rows.device == device]
        curves, interval = time_curves(_faster_mode(d), "seq_len", "backend")
        peak, peak_span = _peak_at(t, device, d)
        a.tables[f"achieved_{device}"] = curves
        a.numbers[f"gemm_peak_{device}"] = peak
        if peak_span:
            a.interval(f"gemm_peak_{device}", *peak_span)
        a.plot(f"achieved_{device}", xlabel="sequence length n (tokens)", ylabel="achieved matmul GFLOP/s",
               title=f"Equation (1) on {device} against the GEMM peak", scale=1e-9,
               hline=(peak, "measured GEMM peak") if peak == peak else None)
        parts = []
        for backend in curves:
            best = curves[backend].max()
            a.numbers[f"best_fraction_{device}_{backend}"] = best / peak
            if interval:  # the best over n of each n's slowest and of its fastest process: any n may be the best;
                # over the peak, whose rerun moves too (its interval in quadrature, where it has one)
                a.interval(f"best_fraction_{device}_{backend}", *_over_peak(
                    best, interval["low"][backend].max(), interval["high"][backend].max(), peak, peak_span))
            parts.append(f"{backend} peaks at {best / 1e9:.1f} GFLOP/s ({best / peak:.0%}) at n = "
                         f"{curves[backend].idxmax()}" + _two_modes(d[d.backend == backend]))
        sentences.append(f"Equation (1), 8 heads, batch × n = {cases.TOKENS.get(device, '?')} tokens, "
                         f"{conditions(d)}{held} (GEMM peak {peak / 1e9:.1f} GFLOP/s)" + _typical(d) + ": "
                         + "; ".join(parts) + "."
                         + (" A case whose processes ran at two levels counts at its faster one: what the backend "
                            "reaches when its process draws the better state (its allocator keeps its buffers)."
                            if "fast" in d and d.fast.notna().any() else ""))
    a.verdict = " ".join(sentences + _roofline(t, a))
    a.quoted = [f"{k}_{device}_{b}" if k == "best_fraction" else f"{k}_{device}" for device in devices(rows)
                for k, b in [("gemm_peak", None)] + [("best_fraction", b) for b in a.tables[f"achieved_{device}"]]]
    a.answer = " ".join(
        "Best fraction of the measured GEMM peak on " + device + ": "
        + ", ".join(f"{b} {a.numbers[f'best_fraction_{device}_{b}']:.0%}" + span(a, f"best_fraction_{device}_{b}")
                    + _slower(rows[(rows.device == device) & (rows.backend == b)], a.tables[f"achieved_{device}"][b],
                              a.numbers[f"gemm_peak_{device}"])
                    for b in a.tables[f"achieved_{device}"])
        + f" (peak {a.numbers[f'gemm_peak_{device}'] / 1e9:.1f}{_gflops_span(a, f'gemm_peak_{device}')} GFLOP/s)."
        for device in devices(rows))
    a.conditions = (f"8 heads, d_head {'/'.join(str(int(d)) for d in sorted(rows.d_head.dropna().unique()))}, "
                    f"batch × n = {'/'.join(str(cases.TOKENS.get(d, '?')) for d in devices(rows))} tokens, "
                    f"{conditions(rows, n=False)}")
    return a



def _achieved(t: pd.DataFrame) -> pd.DataFrame:
    """The attention cases' achieved matmul FLOP/s at the run's typical speed (``reports.normalised``: each
    process's rate scaled by the control GEMM timed around it), where the run has controls; else as measured.
    The peak is calibrated at the run's start and end; a case's processes run minutes apart, and a shared host's
    speed drifts between them: normalised, a fraction moves between runs by about half as much (docs/MEASURED.md)."""
    rows = ok_rows(t, "attention", "achieved_flops_per_s_normalised")
    return rows if not rows.empty else ok_rows(t, "attention", "achieved_flops_per_s")


def _typical(rows: pd.DataFrame) -> str:
    """What the rates are, where they were normalised (``_achieved``)."""
    return (", each process's rate at the run's typical speed (scaled by the control GEMM timed around it)"
            if (rows.metric == "achieved_flops_per_s_normalised").any() else "")


def _faster_mode(rows: pd.DataFrame) -> pd.DataFrame:
    """Each case at its faster mode (``fast``, ``fast_low``, ``fast_high``: ``reports.spans_over_processes``) where
    its processes ran at two: C2 asks what a backend reaches, and which mode a run's median falls in is a draw."""
    if "fast" not in rows or rows.fast.isna().all():
        return rows
    out, two = rows.copy(), rows.fast.notna()
    out.loc[two, "value"] = rows.fast[two]
    spanned = two & rows.fast_low.notna()
    out.loc[spanned, "low"], out.loc[spanned, "high"] = rows.fast_low[spanned], rows.fast_high[spanned]
    return out


def _slower(rows: pd.DataFrame, curve: pd.Series, peak: float) -> str:
    """' (its faster mode; its slowest process 26%)' where the best n's case ran at two levels, else ''."""
    at = rows[(rows.seq_len == curve.idxmax()) & rows.fast.notna()] if "fast" in rows else rows.iloc[:0]
    if at.empty or at.lowest.isna().all():
        return ""
    return f" (its faster mode; its slowest process {at.lowest.min() / peak:.0%})"


def _two_modes(rows: pd.DataFrame) -> str:
    """' (two modes at n = 128: ...)' for the cases of one backend whose processes ran at two levels."""
    if "modes" not in rows:
        return ""
    split = rows.dropna(subset=["modes"])
    return "".join(f" (two modes at n = {int(r.seq_len)}: {r.modes})" for r in split.itertuples())


def _over_peak(best: float, low: float, high: float, peak: float,
               span: tuple[float, float] | None) -> tuple[float, float]:
    """The interval of ``best`` / ``peak``: each end of the achieved rate's (``low``, ``high``) over the peak,
    its distance from the fraction widened by the peak's log half-width in quadrature where it has one."""
    width = math.log(span[1] / span[0]) / 2 if span else 0.0
    below, above = math.log(best / low) if low < best else 0.0, math.log(high / best) if high > best else 0.0
    fraction = best / peak
    return fraction * math.exp(-math.hypot(below, width)), fraction * math.exp(math.hypot(above, width))


def _gflops_span(a: Analysis, key: str) -> str:
    """' (lo-hi)' in GFLOP/s where number ``key`` has an interval, else ''."""
    return f" ({a.intervals[key][0] / 1e9:.0f}-{a.intervals[key][1] / 1e9:.0f})" if key in a.intervals else ""


def _peak_at(t: pd.DataFrame, device: str, d: pd.DataFrame) -> tuple[float, tuple[float, float] | None]:
    """The measured GEMM peak at the thread count the cases ``d`` ran at (a 1-thread case over the 2-thread
    peak would read as half its fraction; over the 1-thread peak it is right), with its interval where the run
    states one (``reports.peaks.peak_interval``); NaN when the run has no peak there, or the cases ran at
    several thread counts (no one peak to hold them to)."""
    peaks = t[(t.metric == "gemm_peak_flops_per_s") & (t.device == device) & (t.dtype == "float32")]
    peaks = peaks.dropna(subset=["value"])
    if device == "cpu":
        threads = d.threads.dropna().unique()
        peaks = peaks[peaks.threads == threads[0]] if len(threads) == 1 else peaks.iloc[:0]
    if peaks.empty:
        return float("nan"), None
    top = peaks.loc[peaks.value.idxmax()]
    spanned = "low" in top and top.low == top.low and top.high == top.high
    return float(top.value), (float(top.low), float(top.high)) if spanned else None


def _ceilings(t: pd.DataFrame, device: str) -> tuple[float, float] | None:
    """(the matrix product's best measured rate, the better STREAM bandwidth) of ``device`` at its most
    threads, from the run's constants (``reports.tidy``: area "constants"); None without them."""
    c = t[(t.area == "constants") & (t.device == device) & (t.dtype.isin(["float32", None]))]
    if device == "cpu" and c.threads.notna().any():
        c = c[c.threads == c.threads.max()]
    peak = c[(c.metric == "kernel_best_flops_per_s") & (c.method == "gemm")].value
    bandwidth = c[c.metric == "bandwidth_bytes_per_s"].value
    return (float(peak.max()), float(bandwidth.max())) if len(peak) and len(bandwidth) else None


def _roofline(t: pd.DataFrame, a: Analysis) -> list[str]:
    """Each attention and multi-head forward case of the CPU (or the first device) under both ceilings; which
    ceiling each backend and strategy sits under (its median intensity against the ridge point)."""
    sentences = []
    for device in devices(t[t.area.isin(["attention", "multihead"])].dropna(subset=["device"])):
        roof = _ceilings(t, device)
        if roof is None:
            continue
        keys = ["area", "backend", "strategy", "seq_len", "heads", "d_head", "causal", "out_proj", "dtype"]
        rows = t[t.area.isin(["attention", "multihead"]) & (t.method == "forward") & (t.device == device)
                 & (t.status == "ok") & t.metric.isin(["achieved_flops_per_s", "bytes_moved", "matmul_flops"])
                 & (t.dtype.isin(["float32"]) | t.dtype.isna())]
        if rows.empty:
            continue
        filled = rows.assign(**{k: rows[k].astype(object).where(rows[k].notna(), "") for k in keys})
        wide = filled.pivot_table(index=keys, columns="metric", values="value", aggfunc="median").dropna()
        if wide.empty or "bytes_moved" not in wide:
            continue
        wide = wide.reset_index()
        wide["kind"] = wide.area + " " + wide.backend.astype(str) + wide.strategy.astype(str)
        wide["intensity"] = wide.matmul_flops / wide.bytes_moved
        peak, bandwidth = roof
        shape = ", ".join(f"{k} {v}" for k, v in cases.MULTIHEAD_SHAPE.items())
        a.numbers[f"ridge_{device}"] = ridge = peak / bandwidth
        a.tables[f"roofline_{device}"] = wide.groupby("kind").intensity.median().to_frame("median_intensity")
        a.plot(f"roofline_{device}", table=pd.DataFrame({"x": wide.intensity, "y": wide.achieved_flops_per_s,
                                                         "group": wide.kind}),
               kind="scatter", roof=roof, scale=1e-9, xlabel="arithmetic intensity (matmul FLOP per byte moved)",
               ylabel="achieved matmul GFLOP/s", title=f"Roofline on {device}: attention, and multi-head at {shape}")
        under = [f"{kind} under the {'compute' if i >= ridge else 'memory'} ceiling (intensity {i:.0f})"
                 for kind, i in a.tables[f"roofline_{device}"].median_intensity.items()]
        sentences.append(f"Roofline on {device}, forward, {conditions(rows, n=False)} "
                         f"(attention at batch × n = {cases.TOKENS.get(device, '?')} tokens, multi-head at {shape}; "
                         f"ridge at {ridge:.1f} FLOP/byte: {peak / 1e9:.0f} GFLOP/s peak, {bandwidth / 1e9:.0f} GB/s): "
                         + "; ".join(under) + ".")
    return sentences
