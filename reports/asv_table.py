"""asv's results as rows of the tidy table (``reports.columns``): every machine, commit and environment in an
asv results folder, each benchmark method mapped to the (method, metric) the runner records, out-of-memory
cases told apart from skips (``benchmarks.core.hardware.machine.record_asv_oom``), and values that cannot be right
(a time that is not positive) kept as ``invalid`` rows that name them."""

from __future__ import annotations

import ast
import functools
import glob
import importlib
import itertools
import os
import pkgutil

import pandas as pd

import benchmarks
from benchmarks import cases
from benchmarks.core.hardware.machine import PEAK_TOLERANCE
from benchmarks.core.records import read_json

from .columns import GRAPH_METRICS, UNITS, facts, frame


@functools.lru_cache(maxsize=1)
def asv_classes() -> dict[str, type]:
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
    return {name: getattr(cls, "area", "gemm") for name, cls in asv_classes().items()}


#: the benchmarks a paired history adds to asv's results (reports.asv_paired): ratios to a reference commit, which
#: asv's site draws and the report lists the steps of; not measurements of this table
PAIRED_PREFIX = "track_vs_reference_"


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
        data = read_json(path)
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
            rec = read_json(path)
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
                **facts(meta)}
        for key in res.get_all_result_keys():
            parts = key.split(".")
            cls, bench = (parts[-2], parts[-1]) if len(parts) >= 3 else (None, parts[-1])
            if cls not in areas or bench.startswith(PAIRED_PREFIX):
                continue  # a benchmark this suite no longer has, or a paired history's ratios
            method, metric = asv_method_metric(bench)
            params = res.get_result_params(key)
            values = res.get_result_value(key, params)
            stats = res.get_result_stats(key, params)
            names = _asv_param_names(cls, areas, len(params))
            for combo, value, stat in zip(itertools.product(*params), values, stats, strict=False):
                p = dict(zip(names, (ast.literal_eval(v) for v in combo), strict=True))
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
    return frame(rows)


def _asv_problem(metric: str, value) -> str | None:
    """Why a value asv recorded cannot be right (the runner's records pass ``records.problem``), or None."""
    if not isinstance(value, (int, float)) or value in (float("inf"), float("-inf")):
        return f"{value!r} is not a finite number"
    if metric == "time" and value <= 0:
        return f"a time of {value!r} s is not positive"
    if metric == "fraction_of_peak" and value > PEAK_TOLERANCE:
        return f"a fraction of peak of {value:.2f}, above {PEAK_TOLERANCE}: its GEMM peak was calibrated low"
    if value < 0:
        return f"{metric} {value!r} is negative"
    return None


def _asv_param_names(cls: str, areas: dict[str, str], n: int) -> list[str]:
    """The names of an asv class's parameters: the class's own ``param_names`` (the grid areas' classes
    take theirs from cases.axes; GemmPeak and HeadParallelAttention list their own)."""
    names = list(asv_classes()[cls].param_names)
    if len(names) != n:
        raise ValueError(f"asv results for {cls} have {n} parameters; this suite's {areas[cls]} benchmark has {names}")
    return names
