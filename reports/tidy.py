"""Results as one tidy pandas table: one row per case x method x metric, from asv or the runner.

Columns: where it came from (``source``; ``run``, one runner folder or one asv (commit, environment);
``machine``, ``commit``, ``commit_error`` when the runner could not learn the commit, ``env``; ``date`` when
the case's measurement started, ``finished`` when its last round did, the same for one round; ``rounds``, how
many rounds a time was measured in, runner records only), what was measured
(``area``, ``method``, ``metric``, ``unit``, ``value``; ``q25``/``q75``/``iqr`` for times and ``samples``,
how many values they are over), how it went (``status``, ``reason``), every parameter axis of every area
(empty where an area has no such axis) and the machine's facts (CPU model, cores, GPU, torch). ``load()``
takes any mix of runner folders and asv results folders; several machines' results concatenate into one
table.
"""

from __future__ import annotations

import ast
import functools
import glob
import importlib
import itertools
import os
import pkgutil
from collections.abc import Iterable

import pandas as pd

import benchmarks
from benchmarks import cases
from benchmarks.core import profiler, records
from benchmarks.core.records import read_json

#: metric -> unit, for every metric the runner or the asv suite records
UNITS = {
    "time": "s", "peak_rss": "bytes", "matmul_flops": "FLOP", "other_flops": "FLOP",
    "achieved_flops_per_s": "FLOP/s", "fraction_of_peak": "fraction", "tokens_per_s": "token/s",
    "gemm_peak_flops_per_s": "FLOP/s", "gpu_peak_memory_bytes": "bytes", "gpu_power_w": "W",
    "gpu_sm_clock_mhz": "MHz", "gpu_mem_clock_mhz": "MHz", "gpu_utilization_pct": "%",
    "energy_per_token_j": "J/token", "sequential_depth": "operators", "op_launches": "operators",
    "counted_matmul_flops": "FLOP", "control_flops_per_s": "FLOP/s", "time_normalised": "s",
    "time_best_round": "s",
    "compute_s": "s", "comm_s": "s", "comm_share": "fraction", "comm_bytes": "bytes", "comm_bytes_measured": "bytes",
}
#: metrics of the executed graph (the depth area's one method, "graph"), not of a timing
GRAPH_METRICS = ("sequential_depth", "op_launches")
PARAMS = sorted({axis for grid in cases.GRIDS.values() for area in grid.values() for axis in area}
                | {axis for grid in cases.PARALLEL_GRIDS.values() for axis in grid} | {"threads", "ranks", "hosts"})
MACHINE_FACTS = ["cpu_model", "cpu_count", "torch", "cuda", "gpu_name", "gpu_memory_bytes"]
COLUMNS = (["source", "run", "machine", "commit", "commit_error", "env", "date", "finished", "rounds", "area",
            "method", "metric", "unit", "value", "q25", "q75", "iqr", "samples", "status", "reason"]
           + PARAMS + MACHINE_FACTS)


#: parameter and fact columns that hold whole numbers (nullable, so that missing stays missing)
INTEGERS = ["seq_len", "d_head", "heads", "batch", "threads", "d_model", "cpu_count", "ranks", "hosts", "rounds",
            "samples"]


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["date"] = pd.to_datetime(frame["date"], utc=True)
    frame["finished"] = pd.to_datetime(frame["finished"].astype(object).where(frame["finished"].notna(), frame["date"]),
                                       utc=True)
    for column in INTEGERS:
        frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    return frame


def _facts(meta: dict | None) -> dict:
    meta = meta or {}
    return {k: meta.get(k) for k in MACHINE_FACTS}


def _read(path: str) -> dict:
    return read_json(path)


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
    saved = _read(meta_path)
    if records.peaks_problem(saved):
        raise ValueError(f"{meta_path}: {records.peaks_problem(saved)}")
    meta = saved["machine"]
    base = {"source": "runner", "run": os.path.normpath(folder), "machine": saved.get("name") or meta["hostname"],
            "commit": saved.get("commit"), "env": f"torch {meta['torch']}", **_facts(meta),
            "commit_error": None if saved.get("commit") else saved.get("commit_error") or "no commit was recorded"}
    rows = []
    for key, peak in saved["gemm_peaks"].items():
        device, dtype, threads = key.split("/")
        rows.append({**base, "area": "gemm", "method": "matmul", "metric": "gemm_peak_flops_per_s",
                     "unit": UNITS["gemm_peak_flops_per_s"], "value": peak, "status": "ok", "device": device,
                     "dtype": dtype, "threads": None if device == "cuda" else
                     meta["torch_threads"] if threads == "default" else int(threads)})
    kept = []
    for path in sorted(glob.glob(os.path.join(folder, "cases", "*.json"))):
        status, why = _record_status(path, saved.get("commit"))
        if status is None:
            kept.append(_read(path))
            rows.extend(_runner_rows(kept[-1], base))
            continue
        # one bad file never hides the others: its row names it and why, under the case its file name gives
        area, method, params = _params_from_key(os.path.basename(path))
        rows.append({**base, **params, "area": area, "method": method, "status": status,
                     "reason": f"{path}: {why}; a run into this folder sets it aside and measures the case again",
                     "metric": "sequential_depth" if method == "graph" else "time", "unit": None,
                     "value": float("nan")})
    return _frame(rows + _normalised(kept, base))


#: what a case record the report does not count is: cannot be read, or read but wrong (``records.problem``),
#: or measured by another commit than the run folder's (``machine.json``)
NOT_COUNTED = ("unreadable", "invalid", "other commit")


def _record_status(path: str, commit: str | None) -> tuple[str | None, str | None]:
    """(None, None) for a record the report counts, else (one of NOT_COUNTED, why)."""
    try:
        rec = _read(path)
    except ValueError as error:
        return "unreadable", str(error).removeprefix(f"{path}: ")
    why = records.problem(rec)
    if why:
        return "invalid", why
    if rec.get("commit") != commit:
        return "other commit", (f"measured at commit {str(rec.get('commit'))[:8]}, not the run folder's "
                                f"{str(commit)[:8]} (machine.json): not counted as this run's")
    return None, None


#: neighbouring controls (in time order) whose median stands for the machine's speed at one case: a single
#: 10 ms control is itself noisy (18-166 GFLOP/s within one run on a 2-core VM), the drift it is meant to
#: catch is slower than one case
CONTROL_WINDOW = 15


def _normalised(records: list[dict], base: dict) -> list[dict]:
    """``time_normalised`` rows: the time the case would have taken had the machine run at its typical speed
    for this run. Each round's time x the machine's speed at that round / its typical speed (the run's
    median control at that thread count), and the median over the record's rounds. Speed: the control GEMM
    measured around the round (benchmarks.measure.CONTROL_SIZE). A record of one round has one control, too
    noisy alone (18-166 GFLOP/s within one run on a 2-core VM), so there the median of the CONTROL_WINDOW
    controls nearest in time stands for it; with several rounds the median over rounds does that smoothing,
    and each round's own control follows the machine better (on this VM, two 5-round runs: 6.8% apart at
    the median with each round's own control, 7.5% with the window)."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("control_flops_per_s") and r.get("time_median_s")]
    if not ok:
        return []
    rounds = [(i, r.get("threads"), x["control_flops_per_s"], x.get("started_at") or "", x["median_s"],
               len(r.get("rounds") or ()) > 1)
              for i, r in enumerate(ok) for x in r.get("rounds") or
              [{"control_flops_per_s": r["control_flops_per_s"], "started_at": r.get("started_at"),
                "median_s": r["time_median_s"]}] if x.get("control_flops_per_s")]
    frame = pd.DataFrame(rounds, columns=["record", "threads", "control", "started", "time", "own"]).sort_values(
        "started", kind="stable")
    window = frame.groupby("threads").control.transform(
        lambda c: c.rolling(CONTROL_WINDOW, center=True, min_periods=1).median())
    speed = frame.control.where(frame.own, window)
    frame["normalised"] = frame.time * speed / frame.groupby("threads").control.transform("median")
    normalised = frame.groupby("record").normalised.median()
    out = []
    for i, value in normalised.items():
        row = next(x for x in _runner_rows(ok[i], base) if x["metric"] == "time")
        factor = value / row["value"]
        out.append({**row, "metric": "time_normalised", "value": value, "q25": row["q25"] * factor,
                    "q75": row["q75"] * factor, "iqr": row["iqr"] * factor})
    return out


def samples(rec: dict) -> int | None:
    """How many values a runner record's quartiles are over (``benchmarks.measure.combined``). Records
    written before it was kept: one round's blocks; several rounds' quartiles were the medians of each
    round's, over as many blocks as the smallest round had."""
    if rec.get("samples") is not None:
        return rec["samples"]
    rounds = rec.get("rounds") or ()
    return min(r["blocks"] for r in rounds) if len(rounds) > 1 else rec.get("blocks")


def _runner_rows(rec: dict, base: dict) -> list[dict]:
    common = {**base, **rec["params"], "area": rec["area"], "method": rec["method"], "status": rec["status"],
              "reason": rec["reason"], "commit": rec.get("commit") or base["commit"],
              "date": pd.Timestamp(rec["started_at"]) if rec.get("started_at") else pd.NaT}
    if "time_median_s" in rec:  # how many rounds it was timed in (a record older than rounds: one)
        common["rounds"] = len(rec.get("rounds") or ()) or 1
    if len(rec.get("rounds") or ()) > 1:  # measured until its last round (the run's span, tidy.runs)
        common["finished"] = pd.Timestamp(rec["rounds"][-1]["started_at"])
    for fact in ("threads", "hosts"):  # how many threads each rank had, over how many machines its ranks ran
        if rec.get(fact) is not None:
            common[fact] = rec[fact]
    if rec["status"] != "ok":
        metric = "sequential_depth" if rec["method"] == "graph" else "time"
        return [{**common, "metric": metric, "unit": UNITS[metric], "value": float("nan")}]
    rows = [] if "time_median_s" not in rec else [
        {**common, "metric": "time", "unit": "s", "value": rec["time_median_s"], "q25": rec["time_q25_s"],
         "q75": rec["time_q75_s"], "iqr": rec["time_iqr_s"], "samples": samples(rec)}]
    if rec.get("time_best_round_s") is not None:  # several rounds: the least disturbed one's median
        rows.append({**common, "metric": "time_best_round", "unit": "s", "value": rec["time_best_round_s"]})
    for metric, unit in UNITS.items():
        if metric != "time" and rec.get(metric) is not None:
            rows.append({**common, "metric": metric, "unit": unit, "value": _derived(rec, metric)})
    return rows


def _derived(rec: dict, metric: str) -> float:
    """A record's value of ``metric``; a rate from its count over the median time, never the stored rate."""
    time = rec.get("time_median_s")
    for rate, count in records.RATES:
        if metric == rate and time:
            return rec[count] / time
    if metric == "fraction_of_peak" and time:
        return rec["matmul_flops"] / time / rec["gemm_peak_flops_per_s"]
    return rec[metric]


# -- asv ------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _asv_classes() -> dict[str, type]:
    """asv class name -> class, from the suite itself."""
    classes = {}
    for m in pkgutil.iter_modules(benchmarks.__path__):
        if m.name.startswith("bench_"):
            module = importlib.import_module(f"benchmarks.{m.name}")
            for name, obj in vars(module).items():
                if isinstance(obj, type) and obj.__module__ == module.__name__ and not name.startswith("_"):
                    classes[name] = obj
    return classes


def _asv_areas() -> dict[str, str]:
    """asv class name -> area."""
    return {name: getattr(cls, "area", "gemm") for name, cls in _asv_classes().items()}


def asv_method_metric(name: str) -> tuple[str, str]:
    """asv benchmark method name -> (method, metric): ``time_train_step`` -> ("train_step", "time"),
    ``track_generate_matmul_flops`` -> ("generate", "matmul_flops"), ``track_gpu_power_w`` ->
    ("forward", "gpu_power_w"), ``peakmem_forward`` -> ("forward", "peak_rss")."""
    kind, _, rest = name.partition("_")
    if kind == "time":
        return rest, "time"
    if kind == "peakmem":
        return rest, "peak_rss"
    if kind == "track":
        if rest == "gemm_peak_flops_per_s":
            return "matmul", rest
        if rest in GRAPH_METRICS:
            return "graph", rest
        method, _, metric = rest.partition("_")
        if method in ("generate", "train") and metric in UNITS:
            return ("train_step" if method == "train" else method), metric
        return "forward", rest
    raise ValueError(f"{name!r} is not an asv benchmark name (time_, peakmem_ or track_)")


def _asv_metadata(results_dir: str, env: str, machine: str) -> dict | None:
    folder = os.path.join(os.path.dirname(os.path.abspath(results_dir)), "metadata")
    found = sorted(glob.glob(os.path.join(folder, f"{glob.escape(env)}-*.json")))
    for path in found:
        data = _read(path)
        if data["machine"]["hostname"] == machine or len(found) == 1:
            return data["machine"]
    return None


def _asv_ooms(results_dir: str, env: str) -> dict[tuple, str]:
    """(benchmark class, parameter strings) -> reason, for the cases an asv run recorded as out of memory
    (``benchmarks.machine.record_asv_oom``): asv itself stores them as plain skips."""
    folder = os.path.join(os.path.dirname(os.path.abspath(results_dir)), "oom", env)
    out = {}
    for path in glob.glob(os.path.join(glob.escape(folder), "*.json")):
        try:
            rec = _read(path)
            out[(rec["class"], tuple(rec["params"]))] = rec["reason"]
        except (ValueError, KeyError, TypeError):
            continue  # a broken sidecar only loses the reason: the case stays a skip
    return out


def from_asv(results_dir: str) -> pd.DataFrame:
    """Rows from asv's results directory (every machine, commit and environment in it)."""
    from asv.results import iter_results  # asv is needed only to read its results (a GPU machine may lack it)

    if not os.path.isdir(results_dir):
        raise FileNotFoundError(f"no asv results directory at {results_dir!r}")
    areas, rows = _asv_areas(), []
    for res in iter_results(results_dir):
        machine = res.params.get("machine")
        meta = _asv_metadata(results_dir, res.env_name, machine) or {
            "cpu_model": res.params.get("cpu"), "cpu_count": int(res.params.get("num_cpu") or 0) or None,
            "torch": res.params.get("torch")}
        ooms = _asv_ooms(results_dir, res.env_name)
        base = {"source": "asv", "run": f"{os.path.normpath(results_dir)} @ {res.commit_hash[:8]} {res.env_name}",
                "machine": machine, "commit": res.commit_hash, "env": res.env_name,
                "date": pd.Timestamp(max(res.started_at.values()), unit="ms", tz="UTC") if res.started_at else pd.NaT,
                **_facts(meta)}
        for key in res.get_all_result_keys():
            parts = key.split(".")
            cls, bench = (parts[-2], parts[-1]) if len(parts) >= 3 else (None, parts[-1])
            if cls not in areas:
                continue  # a benchmark this suite no longer has
            method, metric = asv_method_metric(bench)
            params = res.get_result_params(key)
            values = res.get_result_value(key, params)
            stats = res.get_result_stats(key, params)
            names = _asv_param_names(cls, areas, len(params))
            for combo, value, stat in zip(itertools.product(*params), values, stats):
                p = dict(zip(names, (ast.literal_eval(v) for v in combo)))
                ok = value is not None and value == value
                wrong = ok and _asv_problem(metric, value)
                oom = None if ok else ooms.get((cls, tuple(combo)))
                row = {**base, **p, "area": areas[cls], "method": method, "metric": metric,
                       "unit": UNITS.get(metric), "value": value if ok and not wrong else float("nan"),
                       "status": "invalid" if wrong else "ok" if ok else "oom" if oom else "skipped",
                       "reason": f"{results_dir} @ {res.commit_hash[:8]}, {key}: {wrong}" if wrong else
                       None if ok else oom or "asv: skipped or failed"}
                if wrong:
                    rows.append(row)
                    continue
                if metric == "time" and stat:
                    row.update(q25=stat.get("q_25"), q75=stat.get("q_75"), samples=stat.get("repeat"))
                    if row["q25"] is not None and row["q75"] is not None:
                        row["iqr"] = row["q75"] - row["q25"]
                rows.append(row)
                if metric == "time" and ok and row["area"] in cases.METHODS and method != "graph":
                    # asv records no throughput; tokens per call follow from the parameters
                    rows.append({**row, "metric": "tokens_per_s", "unit": UNITS["tokens_per_s"], "q25": None,
                                 "q75": None, "iqr": None, "value": cases.tokens(row["area"], p, method) / value})
    return _frame(rows)


def _asv_problem(metric: str, value) -> str | None:
    """Why a value asv recorded cannot be right (the runner's records pass ``records.problem``), or None."""
    if not isinstance(value, (int, float)) or value in (float("inf"), float("-inf")):
        return f"{value!r} is not a finite number"
    if metric == "time" and value <= 0:
        return f"a time of {value!r} s is not positive"
    if value < 0:
        return f"{metric} {value!r} is negative"
    return None


def _asv_param_names(cls: str, areas: dict[str, str], n: int) -> list[str]:
    """The names of an asv class's parameters: the class's own ``param_names`` (the grid areas' classes
    take theirs from cases.axes; GemmPeak and HeadParallelAttention list their own)."""
    names = list(_asv_classes()[cls].param_names)
    if len(names) != n:
        raise ValueError(f"asv results for {cls} have {n} parameters; this suite's {areas[cls]} benchmark has {names}")
    return names


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


def runs(t: pd.DataFrame) -> pd.DataFrame:
    """One row per run: machine, source, commit (or why there is none), environment, when, and its cases
    by status."""
    timed = t[t.metric.isin(["time", "sequential_depth"])]
    status = timed.groupby(["run", "status"]).size().unstack("status", fill_value=0)
    out = t.groupby("run", sort=False).agg(machine=("machine", "first"), source=("source", "first"),
                                          commit=("commit", "first"), commit_error=("commit_error", "first"),
                                          env=("env", "first"), first=("date", "min"), last=("finished", "max"),
                                          rounds=("rounds", "max"))
    out["commit"] = [c[:8] if isinstance(c, str) else f"none: {e}" for c, e in zip(out.commit, out.commit_error)]
    out = out.drop(columns="commit_error").join(status).fillna({s: 0 for s in status.columns})
    return out


def load_profiles(paths: Iterable[str], machine: str | None = None) -> list[dict]:
    """The profile records (``benchmarks.profile``) in runner folders among ``paths``, of ``machine`` (every
    machine when None); each gets ``root``, the folder it was read from, and ``machine``."""
    out = []
    for path in paths:
        meta = os.path.join(path, "machine.json")
        if not os.path.exists(meta):
            continue
        saved = _read(meta)
        name = saved.get("name") or saved["machine"]["hostname"]
        if machine is None or name == machine:
            out.extend({**r, "root": path, "machine": name} for r in profiler.load(path))
    return out
