"""A run's GEMM peaks as the report holds its cases to them: the calibrated peaks of machine.json, a peak
raised where a case passed it (a calibration slowed by other processes), and records too fast to be
possible on this machine (never counted, and they raise no peak)."""

from __future__ import annotations

import numpy as np

from benchmarks.core import records
from benchmarks.core.hardware import machine
from benchmarks.core.records import case_key
from benchmarks.core.timing import rerun


def peaks_of(saved: dict) -> dict[str, float]:
    """machine.json's GEMM peaks by ``machine.peak_key``, the default thread count resolved to its number
    (older folders name it ``default``); each key's best where two name one thread count."""
    peaks: dict[str, float] = {}
    for key, peak in saved["gemm_peaks"].items():
        device, dtype, threads = key.split("/")
        if device == "cpu" and threads == "default":
            key = f"{device}/{dtype}/{saved['machine']['torch_threads']}"
        peaks[key] = max(peak, peaks.get(key, 0.0))
    return peaks


def peak_interval(saved: dict, key: str, peak: float) -> tuple[float, float] | None:
    """Where a rerun's calibrated peak ``key`` lands: a best of the run's few calibrations (machine.json's
    ``calibrations``: at its start and end), which varies about as their median does, its log variance
    moderated by the variance of the run's other peaks between calibrations (``rerun.half_width``); None
    with one calibration."""
    calibrations = [c for c in saved.get("calibrations") or [] if isinstance(c, dict)]
    logs = {k: np.log([c[k] for c in calibrations if records.positive(c.get(k))]) for k in saved["gemm_peaks"]}
    prior = rerun.typical_variance(list(logs.values()))
    if prior is None or len(logs.get(key, ())) < 2:
        return None
    return rerun.interval(peak, rerun.half_width(logs[key], prior))


def peak_key(rec: dict) -> str:
    """The ``machine.peak_key`` a record's fraction of peak is over: its device, dtype and threads."""
    device, dtype = rec["params"].get("device", "cpu"), rec["params"].get("dtype", "float32")
    return f"{device}/{dtype}/{rec['threads'] if device == 'cpu' and rec.get('threads') else 'default'}"


def impossible(kept: list[dict], saved: dict, calibrated: dict[str, float]) -> list[tuple[dict, str]]:
    """Records whose FLOP/s pass ``machine.IMPOSSIBLE_OVER_PEAK`` times the best matrix-product rate this
    machine ever showed for their device and dtype (every calibration in machine.json and the performance
    model's kernel rates, at every thread count), with why: not counted, and they raise no peak."""
    best: dict[str, float] = {}
    kernels = {key: max((r for g in c.get("kernels", {}).values() for r in g.get("flops_per_s", ())
                         if records.positive(r)), default=0.0)
               for key, c in (saved.get("constants") or {}).items() if isinstance(c, dict)}
    for peaks in [calibrated, *(saved.get("calibrations") or []), kernels]:
        for key, peak in peaks.items():
            device, dtype, _ = key.split("/")
            if records.positive(peak):
                best[f"{device}/{dtype}"] = max(peak, best.get(f"{device}/{dtype}", 0.0))
    out = []
    for rec in kept:
        if rec["status"] != "ok" or not rec.get("matmul_flops") or not rec.get("time_median_s"):
            continue
        key = peak_key(rec).rsplit("/", 1)[0]
        achieved = rec["matmul_flops"] / rec["time_median_s"]
        if key in best and achieved > machine.IMPOSSIBLE_OVER_PEAK * best[key]:
            out.append((rec, f"{case_key(rec['area'], rec['method'], rec['params'])}: {achieved / 1e9:.4g} GFLOP/s "
                             f"in {rec['time_median_s']:.3g} s, more than {machine.IMPOSSIBLE_OVER_PEAK:g}x the best "
                             f"product rate this machine showed ({best[key] / 1e9:.1f} GFLOP/s): an impossible record, "
                             "not counted; delete it and resume the run to measure the case again"))
    return out


def too_low(kept: list[dict], peaks: dict[str, float]) -> dict[str, tuple[float, str]]:
    """Peaks that a case's achieved FLOP/s passed by more than ``machine.PEAK_TOLERANCE``: key -> (the best
    such FLOP/s, which case). Such a peak was calibrated low; it is raised to that case's FLOP/s, so that no
    fraction of peak is ever published above 1."""
    out: dict[str, tuple[float, str]] = {}
    for rec in kept:
        if rec["status"] != "ok" or rec.get("fraction_of_peak") is None or peak_key(rec) not in peaks:
            continue
        key, achieved = peak_key(rec), rec["matmul_flops"] / rec["time_median_s"]
        if machine.bounded_fraction(achieved, peaks[key])[1] and achieved > out.get(key, (0.0, ""))[0]:
            case = case_key(rec["area"], rec["method"], rec["params"])
            out[key] = (achieved, f"{achieved / 1e9:.1f} GFLOP/s that {case}")
    return out
