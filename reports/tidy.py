"""Results as one tidy pandas table: one row per case x method x metric, from asv or the runner.

Columns: where it came from (``source``; ``run``, one runner folder or one asv (commit, environment);
``machine``, ``commit``, ``commit_error`` when the runner could not learn the commit, ``env``; ``date`` when
the case's measurement started, ``finished`` when its last round did, the same for one round; ``rounds``, how
many rounds a time was measured in, of ``rounds_planned``, runner records only), what was measured
(``area``, ``method``, ``metric``, ``unit``, ``value``; ``q25``/``q75``/``iqr`` for times and ``samples``,
how many values they are over), how it went (``status``, ``reason``), every parameter axis of every area
(empty where an area has no such axis) and the machine's facts (CPU model, cores, GPU, torch); the columns
are defined in ``reports.columns``, asv's rows made in ``reports.asv_table``. ``load()`` takes any mix of
runner folders and asv results folders; several machines' results concatenate into one table. A runner
record is counted only if it passes ``records.problem`` and is of its folder's commit (else a row that
names it: ``NOT_COUNTED``); rates come from counts over the median time, fractions of peak from the run's
best GEMM peak, raised where a case passed it (``peaks.too_low``).
"""

from __future__ import annotations

import ast
import glob
import os
import sys
from collections.abc import Iterable

import pandas as pd

from benchmarks.core import records
from benchmarks.core.hardware import machine, perfmodel
from benchmarks.core.profiling import profiler
from benchmarks.core.records import read_json

from . import normalised, spans_over_processes
from .asv_table import asv_method_metric, from_asv
from .columns import COLUMNS, CONSTANTS, GRAPH_METRICS, PARAMS, PREDICTED, UNITS, facts, frame
from .peaks import impossible, peak_interval, peak_key, peaks_of, too_low

__all__ = ["COLUMNS", "GRAPH_METRICS", "NOT_COUNTED", "PARAMS", "UNITS", "asv_method_metric", "constants_of", "counted",
           "between_of_run", "between_runs_of", "from_asv", "from_runner", "load", "load_pairs", "load_profiles",
           "unique_paths"]


def _params_from_key(name: str) -> tuple[str, str, dict]:
    """(area, method, params) from a record's file name (``runner.case_key``), for a record that cannot
    be read: its row still says which case it was."""
    area, method, *pairs = name.removesuffix(".json").split("--") + [""]  # a file not named by case_key: no method
    params = {}
    for pair in pairs:
        k, _, v = pair.partition("=")
        try:
            params[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            params[k] = v
    return area, method, {k: v for k, v in params.items() if k in PARAMS}


# -- the in-process runner ------------------------------------------------------------------------

def from_runner(folder: str) -> pd.DataFrame:
    """Rows from a runner output folder (``machine.json`` and ``cases/*.json``)."""
    meta_path = os.path.join(folder, "machine.json")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"{folder!r} is not a runner output folder: it has no machine.json")
    saved = read_json(meta_path)
    if records.peaks_problem(saved):
        raise ValueError(f"{meta_path}: {records.peaks_problem(saved)}")
    meta = saved["machine"]
    base = {"source": "runner", "run": os.path.normpath(folder), "machine": saved.get("name") or meta["hostname"],
            "commit": saved.get("commit"), "env": f"torch {meta['torch']}", **facts(meta),
            "commit_error": None if saved.get("commit") else saved.get("commit_error") or "no commit was recorded"}
    rows, kept = [], []
    for path in sorted(glob.glob(os.path.join(folder, "cases", "*.json"))):
        status, why = _record_status(path, saved.get("commit"))
        if status is None:
            kept.append(read_json(path))
            continue
        # one bad file never hides the others: its row names it and why, under the case its file name gives
        area, method, params = _params_from_key(os.path.basename(path))
        rows.append({**base, **params, "area": area, "method": method, "status": status,
                     "reason": f"{path}: {why}; a run into this folder sets it aside and measures the case again",
                     "metric": "sequential_depth" if method == "graph" else "time", "unit": None,
                     "value": float("nan")})
    calibrated = peaks_of(saved)
    for rec, why in impossible(kept, saved, calibrated):
        kept.remove(rec)
        rows.append({**base, **rec["params"], "area": rec["area"], "method": rec["method"], "status": "invalid",
                     "reason": why, "metric": "time", "unit": None, "value": float("nan")})
    raised = too_low(kept, calibrated)
    peaks = {**calibrated, **{key: achieved for key, (achieved, _) in raised.items()}}
    for key, peak in peaks.items():
        device, dtype, threads = key.split("/")
        spans = None if key in raised else peak_interval(saved, key, peak)
        rows.append({**base, **({"low": spans[0], "high": spans[1]} if spans else {}),
                     "area": "gemm", "method": "matmul", "metric": "gemm_peak_flops_per_s",
                     "unit": UNITS["gemm_peak_flops_per_s"], "value": peak, "status": "ok", "device": device,
                     "dtype": dtype, "threads": None if device == "cuda" else int(threads),
                     "reason": f"raised from the calibrated {calibrated[key] / 1e9:.1f} GFLOP/s to the "
                               f"{raised[key][1]} achieved: the calibration read low (a busy machine?)"
                               if key in raised else None})
    priors = spans_over_processes.priors(kept)
    for rec in kept:
        key = peak_key(rec)
        rows.extend(_runner_rows(rec, base, peaks.get(key), calibrated.get(key),
                                 priors.get((rec["area"], rec["params"].get("device")))))
    models = constants_of(saved)
    rows.extend(_constant_rows(saved, base))
    for rec in kept:
        rows.extend(_predicted_rows(rec, base, models.get(_constants_key(rec, saved))))
    return frame(rows + _normalised(kept, base, peaks) + spans_over_processes.speedups(kept, rows))


def counted(folder: str) -> tuple[dict, list[dict]]:
    """A runner folder's ``machine.json`` and the case records the report counts (``_record_status``)."""
    saved = read_json(os.path.join(folder, "machine.json"))
    paths = sorted(glob.glob(os.path.join(folder, "cases", "*.json")))
    return saved, [read_json(p) for p in paths if _record_status(p, saved.get("commit"))[0] is None]


def _constants_key(rec: dict, saved: dict) -> str:
    """The ``machine.peak_key`` of the constants that price a record: its device, dtype and threads, a CPU
    record without a thread count at the run's default."""
    key = peak_key(rec)
    return key.replace("/default", f"/{saved['machine'].get('torch_threads')}") if key.startswith("cpu/") else key


def constants_of(saved: dict) -> dict[str, perfmodel.Constants]:
    """machine.json's measured constants (``constants_cache.this_machine``) as the performance model's."""
    return {key: perfmodel.Constants.measured(c) for key, c in (saved.get("constants") or {}).items()}


def _constant_rows(saved: dict, base: dict) -> list[dict]:
    """Area ``constants``: each kernel's best rate, the STREAM bandwidths, each pointwise operator's rate
    beyond the caches, the last-level cache and the dispatch overheads."""
    rows = []
    for key, c in (saved.get("constants") or {}).items():
        device, dtype, threads = key.split("/")
        at = {**base, "area": "constants", "status": "ok", "device": device, "dtype": dtype,
              "threads": None if device == "cuda" else int(threads)}
        values = [(kind, "kernel_best_flops_per_s", max(g["flops_per_s"])) for kind, g in c["kernels"].items()]
        values += [("stream_copy", "bandwidth_bytes_per_s", c["copy_bytes_per_s"]),
                   ("stream_triad", "bandwidth_bytes_per_s", c["triad_bytes_per_s"])]
        values += [(kind, "overhead_s", seconds) for kind, seconds in c["overhead_s"].items()]
        if c.get("pointwise"):
            values += [(kind, "written_bytes_per_s", rates[-1])
                       for kind, rates in c["pointwise"]["written_bytes_per_s"].items()]
        if c.get("cache_bytes"):
            values.append(("last_level", "cache_bytes", c["cache_bytes"]))
        rows.extend({**at, "method": method, "metric": metric, "unit": CONSTANTS[metric], "value": value}
                    for method, metric, value in values)
    return rows


def _predicted_rows(rec: dict, base: dict, constants: perfmodel.Constants | None) -> list[dict]:
    """A timed record's prediction (``perfmodel.predict`` over the operators it executed, with the run's
    constants at its device, dtype and threads): ``predicted_time`` and its three terms, each row with the
    call's ``bound``, and the bytes its operators read and write (``bytes_moved``: the roofline's
    intensity); none without the operators or the constants. Where the case and the constants both timed the
    control GEMM, the prediction is at the case's speed (``predicted_speed``: its control over the constants',
    each term divided by it): a shared host that ran slower while the case was timed than while the constants
    were would otherwise show as the model's error."""
    if constants is None or rec["status"] != "ok" or "time_median_s" not in rec or not rec.get("ops"):
        return []
    p = perfmodel.predict([perfmodel.Priced(**op) for op in rec["ops"]], constants, rec.get("dispatches"))
    speed = (rec["control_flops_per_s"] / constants.control_flops_per_s
             if rec.get("control_flops_per_s") and constants.control_flops_per_s else None)
    common = {**base, **rec["params"], "area": rec["area"], "method": rec["method"], "status": "ok",
              "reason": None, "bound": p.bound, "threads": rec.get("threads"),
              "date": pd.Timestamp(rec["started_at"]) if rec.get("started_at") else pd.NaT}
    at = 1 / (speed or 1.0)
    values = {"predicted_time": p.time_s * at, "predicted_compute": p.compute_s * at,
              "predicted_memory": p.memory_s * at, "predicted_overhead": p.overhead_s * at,
              "bytes_moved": sum(op["bytes"] * op["count"] for op in rec["ops"]),
              **({"predicted_speed": speed} if speed else {})}
    return [{**common, "metric": metric, "unit": PREDICTED[metric], "value": value} for metric, value in values.items()]


#: what a case record the report does not count is: cannot be read, or read but wrong (``records.problem``),
#: or measured by another commit than the run folder's (``machine.json``)
NOT_COUNTED = ("unreadable", "invalid", "other commit")


def _record_status(path: str, commit: str | None) -> tuple[str | None, str | None]:
    """(None, None) for a record the report counts, else (one of NOT_COUNTED, why)."""
    try:
        rec = read_json(path)
    except ValueError as error:
        return "unreadable", str(error).removeprefix(f"{path}: ")
    why = records.case_problem(path, rec)
    if why:
        return "invalid", why
    if rec.get("commit") != commit:
        return "other commit", (f"measured at commit {records.short(rec.get('commit'))}, not the run folder's "
                                f"{records.short(commit)} (machine.json): not counted as this run's")
    return None, None


def _normalised(kept: list[dict], base: dict, peaks: dict[str, float] | None = None) -> list[dict]:
    """``time_normalised`` and ``achieved_flops_per_s_normalised`` rows: the time and the rate the case would
    have had, had the machine run at its typical speed for this run (``reports.normalised``), with their interval
    over the processes' normalised times (moderated by the variance typical of the area's normalised cases)."""
    pairs = normalised.records(kept)
    priors = spans_over_processes.priors([norm for _, norm in pairs])
    names = {"time": "time_normalised", "achieved_flops_per_s": "achieved_flops_per_s_normalised"}
    return [{**row, "metric": names[row["metric"]], "unit": UNITS[names[row["metric"]]]} for rec, norm in pairs
            for row in _runner_rows(norm, base, (peaks or {}).get(peak_key(rec)),
                                    prior=priors.get((rec["area"], rec["params"].get("device"))))
            if row["metric"] in names]


def samples(rec: dict) -> int | None:
    """How many values a runner record's quartiles are over (``benchmarks.measure.combined``). Records
    written before it was kept: one round's blocks; several rounds' quartiles were the medians of each
    round's, over as many blocks as the smallest round had."""
    if rec.get("samples") is not None:
        return rec["samples"]
    rounds = rec.get("rounds") or ()
    return min(r["blocks"] for r in rounds) if len(rounds) > 1 else rec.get("blocks")


def _runner_rows(rec: dict, base: dict, peak: float | None = None, calibrated: float | None = None,
                 prior: float | None = None) -> list[dict]:
    """A record's rows; ``peak``: the run's GEMM peak for its device, dtype and threads (``peaks.peaks_of``, raised by
    ``peaks.too_low``), which its fraction of peak is over (the record's own stored peak without one); a case
    that passed the ``calibrated`` peak by more than the tolerance says so on its fraction's row; ``prior``: the
    variance of a process typical of its area in this run (``spans_over_processes.priors``), which its interval
    is moderated by."""
    common = {**base, **rec["params"], "area": rec["area"], "method": rec["method"], "status": rec["status"],
              "reason": rec["reason"], "commit": rec.get("commit") or base["commit"],
              "date": pd.Timestamp(rec["started_at"]) if rec.get("started_at") else pd.NaT}
    if "time_median_s" in rec:  # how many rounds it was timed in, of how many planned (older records: one)
        common["rounds"] = len(rec.get("rounds") or ()) or 1
        common["rounds_planned"] = rec.get("rounds_planned", 1)
    if len(rec.get("rounds") or ()) > 1:  # measured until its last round (the run's span, analyses.runs.table)
        common["finished"] = pd.Timestamp(rec["rounds"][-1]["started_at"])
    for fact in ("threads", "hosts"):  # how many threads each rank had, over how many machines its ranks ran
        if rec.get(fact) is not None:
            common[fact] = rec[fact]
    if rec["status"] != "ok":
        metric = "sequential_depth" if rec["method"] == "graph" else "time"
        return [{**common, "metric": metric, "unit": UNITS[metric], "value": float("nan")}]
    spans = spans_over_processes.spans(rec, prior)
    rows = [] if "time_median_s" not in rec else [
        {**common, "metric": "time", "unit": "s", "value": rec["time_median_s"], "q25": rec["time_q25_s"],
         "q75": rec["time_q75_s"], "iqr": rec["time_iqr_s"], "samples": samples(rec), **spans,
         "process_times": spans_over_processes.process_times(rec)}]
    if rec.get("time_best_round_s") is not None:  # several rounds: the least disturbed one's median
        rows.append({**common, "metric": "time_best_round", "unit": "s", "value": rec["time_best_round_s"]})
    for metric, unit in UNITS.items():
        if metric != "time" and rec.get(metric) is not None:
            row = {**common, "metric": metric, "unit": unit, "value": _derived(rec, metric, peak)}
            if metric in PER_TIME and spans:  # a rate's interval from its time's, inverted
                median = rec["time_median_s"]
                row.update(low=row["value"] * median / spans["high"], high=row["value"] * median / spans["low"],
                           lowest=row["value"] * median / spans["highest"],
                           highest=row["value"] * median / spans["lowest"],
                           processes=spans["processes"], modes=spans.get("modes"),
                           **spans_over_processes.per_time(spans, row["value"] * median))
            rows.append(row)
    if calibrated and rec.get("fraction_of_peak") is not None:
        over = rec["matmul_flops"] / rec["time_median_s"] / calibrated
        if over > machine.PEAK_TOLERANCE:
            next(r for r in rows if r["metric"] == "fraction_of_peak")["reason"] = (
                f"achieved {over:.2f}x the calibrated GEMM peak: the peak was raised (a calibration that read low)")
    return rows


#: metrics that are a count over the time (their interval over processes is the time's, inverted)
PER_TIME = (*(rate for rate, _ in records.RATES), "fraction_of_peak")


def _derived(rec: dict, metric: str, peak: float | None = None) -> float:
    """A record's value of ``metric``; a rate from its count over the median time, never the stored rate;
    a fraction of peak over ``peak`` (the run's, after every calibration) where given."""
    time = rec.get("time_median_s")
    for rate, count in records.RATES:
        if metric == rate and time:
            return rec[count] / time
    if metric in ("fraction_of_peak", "gemm_peak_flops_per_s") and time and peak:
        return rec["matmul_flops"] / time / peak if metric == "fraction_of_peak" else peak
    if metric == "fraction_of_peak" and time:
        return rec["matmul_flops"] / time / rec["gemm_peak_flops_per_s"]
    return rec[metric]


# -- any mix --------------------------------------------------------------------------------------

def unique_paths(paths: Iterable[str]) -> list[str]:
    """``paths`` with each folder once (the same folder named twice, or by two spellings, is read once:
    counting one run twice would weigh it double)."""
    seen, out = set(), []
    for path in paths:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            out.append(path)
    return out


def load(paths: Iterable[str]) -> pd.DataFrame:
    """One table from runner folders and asv results folders (``.asv/results``), in any mix, each folder
    read once. Each run keeps its own ``run`` label: nothing downstream pools two runs."""
    frames = []
    for path in unique_paths(paths):
        if os.path.exists(os.path.join(path, "machine.json")) and os.path.isdir(os.path.join(path, "cases")):
            frames.append(from_runner(path))
        elif os.path.isdir(path) and glob.glob(os.path.join(path, "*", "machine.json")):
            frames.append(from_asv(path))
        else:
            raise ValueError(f"{path!r} is neither a runner output folder (machine.json + cases/) nor an asv "
                             f"results folder (<machine>/machine.json)")
    if not frames:
        raise ValueError("no results given: pass runner output folders or asv results folders")
    return pd.concat(frames, ignore_index=True)


def _runner_folders(paths: Iterable[str], machine: str | None) -> Iterable[tuple[str, str, dict]]:
    """(folder, machine name, its machine.json) of each runner folder among ``paths`` (those with a machine.json), of
    ``machine`` (every machine when None)."""
    for path in paths:
        meta = os.path.join(path, "machine.json")
        if not os.path.exists(meta):
            continue
        saved = read_json(meta)
        name = saved.get("name") or saved["machine"]["hostname"]
        if machine is None or name == machine:
            yield path, name, saved


def load_pairs(paths: Iterable[str], machine: str | None = None) -> list[dict]:
    """The paired-ratio records (``benchmarks.pairs``: ``pairs-<device>.json``) in runner folders among
    ``paths``, of ``machine`` (every machine when None), each with ``root`` and ``machine``; a record that
    cannot be read or is not right is named on stderr and left out."""
    out = []
    for path, name, saved in _runner_folders(paths, machine):
        commit = saved.get("commit")
        for file in sorted(glob.glob(os.path.join(path, "pairs-*.json"))):
            try:
                record = read_json(file)
            except records.UnreadableRecord as error:
                print(f"warning: {error}; not counted", file=sys.stderr)
                continue
            problem = records.pairs_problem(record)
            if not problem and record.get("commit") != commit:
                problem = (f"measured at commit {records.short(record.get('commit'))}, not the run folder's "
                           f"{records.short(commit)} (machine.json)")
            if problem:
                print(f"warning: {file}: {problem}; not counted", file=sys.stderr)
                continue
            out.append({**record, "root": path, "machine": name, "run_regime": saved["machine"].get("regime")})
    return out


def between_runs_of(folder: str) -> dict:
    """What a run folder's ``machine.json`` holds of the variance between its machine's runs
    (``benchmarks.core.hardware.between_runs``: "variance", "runs", "measured_at"); empty for a folder that holds
    none (or is not a runner folder)."""
    meta = os.path.join(folder, "machine.json")
    return (read_json(meta).get("between_runs") or {}) if os.path.exists(meta) else {}


def between_of_run(folder: str) -> dict[str, float]:
    """The variance between runs by group of figures that a run folder holds (``between_runs_of``), which
    ``reports.analyses.base.Analysis.interval`` adds."""
    held = between_runs_of(folder).get("variance") or {}
    return {k: float(v) for k, v in held.items() if isinstance(v, (int, float)) and v > 0}


def load_profiles(paths: Iterable[str], machine: str | None = None) -> list[dict]:
    """The profile records (``attention-bench profile``) in runner folders among ``paths``, of ``machine`` (every
    machine when None); each gets ``root``, the folder it was read from, ``machine``, and ``run_regime``, the
    regime of the run whose folder holds it (for a profile that does not state its own)."""
    return [{**r, "root": path, "machine": name, "run_regime": saved["machine"].get("regime")}
            for path, name, saved in _runner_folders(paths, machine) for r in profiler.load(path)]

