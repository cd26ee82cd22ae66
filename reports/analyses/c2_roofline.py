"""C2: achieved matmul FLOP/s of equation (1) per backend against the machine's measured GEMM peak."""

from __future__ import annotations

import pandas as pd

from benchmarks import cases

from .base import Analysis, conditions, devices, gpu_missing, hold_axes, not_measured, ok_rows


def analyse_roofline(t: pd.DataFrame) -> Analysis:
    """C2: achieved matmul FLOP/s of equation (1) per backend against the machine's GEMM peak."""
    rows, held = hold_axes(ok_rows(t, "attention", "achieved_flops_per_s"), {"causal": False, "d_head": None,
                                                                      "dtype": "float32"})
    a = Analysis("c2_roofline", "Achieved FLOP/s against the measured GEMM peak", "C2", "",
                 missing=gpu_missing(t, "attention"))
    if rows.empty:
        return a.without("no achieved_flops_per_s", not_measured(t, "attention", "attention FLOP/s"))
    sentences = []
    for device in devices(rows):
        d = rows[rows.device == device]
        curves = d.groupby(["seq_len", "backend"]).value.median().unstack("backend")
        peaks = t[(t.metric == "gemm_peak_flops_per_s") & (t.device == device) & (t.dtype == "float32")]
        default_peak = peaks[peaks.threads.isna() | (peaks.threads == peaks.threads.max())].value
        peak = float(default_peak.max()) if len(default_peak) else float("nan")
        a.tables[f"achieved_{device}"] = curves
        a.numbers[f"gemm_peak_{device}"] = peak
        a.plot(f"achieved_{device}", xlabel="sequence length n (tokens)", ylabel="achieved matmul GFLOP/s",
               title=f"Equation (1) on {device} against the GEMM peak", scale=1e-9,
               hline=(peak, "measured GEMM peak") if peak == peak else None)
        parts = []
        for backend in curves:
            best = curves[backend].max()
            a.numbers[f"best_fraction_{device}_{backend}"] = best / peak
            parts.append(f"{backend} peaks at {best / 1e9:.1f} GFLOP/s ({best / peak:.0%}) at n = "
                         f"{curves[backend].idxmax()}")
        sentences.append(f"Equation (1), 8 heads, batch × n = {cases.TOKENS.get(device, '?')} tokens, "
                         f"{conditions(d)}{held} (GEMM peak {peak / 1e9:.1f} GFLOP/s): " + "; ".join(parts) + ".")
    a.verdict = " ".join(sentences)
    a.answer = " ".join(
        "Best fraction of the measured GEMM peak on " + device + ": "
        + ", ".join(f"{b} {a.numbers[f'best_fraction_{device}_{b}']:.0%}" for b in a.tables[f"achieved_{device}"])
        + f" (peak {a.numbers[f'gemm_peak_{device}'] / 1e9:.1f} GFLOP/s)." for device in devices(rows))
    a.conditions = (f"8 heads, d_head {'/'.join(str(int(d)) for d in sorted(rows.d_head.dropna().unique()))}, "
                    f"batch × n = {'/'.join(str(cases.TOKENS.get(d, '?')) for d in devices(rows))} tokens, "
                    f"{conditions(rows, n=False)}")
    return a

