"""The tidy table's columns: every metric with its unit, every parameter axis, the machine's facts, and
``frame``, which makes rows into a table with them (``reports.tidy`` reads runner folders into it,
``reports.asv_table`` asv's results), and ``write_csv``, which writes such a table whole or not at all."""

from __future__ import annotations

import pandas as pd

from benchmarks import cases
from benchmarks.core import records

#: metric -> unit, for every metric the runner or the asv suite records
UNITS = {
    "time": "s", "peak_rss": "bytes", "matmul_flops": "FLOP", "other_flops": "FLOP",
    "achieved_flops_per_s": "FLOP/s", "fraction_of_peak": "fraction", "tokens_per_s": "token/s",
    "gemm_peak_flops_per_s": "FLOP/s", "gpu_peak_memory_bytes": "bytes", "gpu_power_w": "W",
    "gpu_sm_clock_mhz": "MHz", "gpu_mem_clock_mhz": "MHz", "gpu_utilization_pct": "%",
    "energy_per_token_j": "J/token", "sequential_depth": "operators", "op_launches": "operators",
    "counted_matmul_flops": "FLOP", "control_flops_per_s": "FLOP/s", "time_normalised": "s",
    "achieved_flops_per_s_normalised": "FLOP/s",
    "time_best_round": "s", "others_cpu_share": "fraction", "speedup_per_process": "x",
    "compute_s": "s", "comm_s": "s", "comm_share": "fraction", "comm_bytes": "bytes", "comm_bytes_measured": "bytes",
}
#: the performance model's rows (``reports.tidy``: predicted from the run's constants, with a ``bound``)
PREDICTED = {"predicted_time": "s", "predicted_compute": "s", "predicted_memory": "s", "predicted_overhead": "s",
             "bytes_moved": "bytes", "predicted_speed": "x"}
#: the machine's constants, area "constants" (method: the kernel, the STREAM kernel or the dispatch kind)
CONSTANTS = {"kernel_best_flops_per_s": "FLOP/s", "bandwidth_bytes_per_s": "B/s", "overhead_s": "s",
             "written_bytes_per_s": "B/s", "cache_bytes": "B"}
#: metrics of the executed graph (the depth area's one method, "graph"), not of a timing
GRAPH_METRICS = ("sequential_depth", "op_launches")
PARAMS = sorted({axis for grid in cases.GRIDS.values() for area in grid.values() for axis in area}
                | {axis for grid in cases.PARALLEL_GRIDS.values() for axis in grid} | {"threads", "ranks", "hosts"})
MACHINE_FACTS = ["cpu_model", "cpu_count", "torch", "cuda", "gpu_name", "gpu_memory_bytes", "free_page_reporting",
                 "runtime"]
COLUMNS = (["source", "run", "machine", "commit", "commit_error", "env", "date", "finished", "rounds",
            "rounds_planned", "area",
            "method", "metric", "unit", "value", "q25", "q75", "iqr", "samples", "low", "high", "lowest", "highest",
            "processes", "process_times", "short_processes", "modes", "fast", "fast_low", "fast_high",
            "status", "reason", "bound"]
           + PARAMS + MACHINE_FACTS)


#: parameter and fact columns that hold whole numbers (nullable, so that missing stays missing)
INTEGERS = ["seq_len", "d_head", "heads", "batch", "threads", "d_model", "cpu_count", "ranks", "hosts", "rounds",
            "rounds_planned", "samples", "processes", "short_processes"]


def frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["date"] = pd.to_datetime(frame["date"], utc=True)
    frame["finished"] = pd.to_datetime(frame["finished"].astype(object).where(frame["finished"].notna(), frame["date"]),
                                       utc=True)
    for column in INTEGERS:
        frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    return frame


def facts(meta: dict | None) -> dict:
    """The machine's facts a row carries; ``runtime``: the runtime settings the run measured in
    (``records.regime``: "default", or the variables set), None where the results do not say."""
    meta = meta or {}
    return {**{k: meta.get(k) for k in MACHINE_FACTS}, "runtime": runtime(meta.get("regime"))}


def runtime(regime: dict | None) -> str | None:
    """A regime's runtime settings in words (``records.regime``): "default", or the variables set; None where
    there is no regime."""
    env = (regime or {}).get("env")
    return None if env is None else ", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "default"


def short_commit(commit: str | None) -> str:
    return records.short(commit) if commit else "unknown"


def machine_line(m: dict) -> str:
    """A machine's facts in one line: CPU, cores, torch, GPU."""
    gpu = f", {m['gpu_name']}" if m.get("gpu_name") else ""
    return f"{m['cpu_model']}, {m['cpu_count']} cores, torch {m['torch']}{gpu}"


def _is_csv_with(columns: list[str]):
    """``is_own`` for ``records.check_replaceable``: a CSV file whose header starts with ``columns``."""
    def own(path: str) -> bool:
        with open(path, encoding="utf-8") as f:
            header = f.readline().rstrip("\r\n").split(",")
        return header[:len(columns)] == columns
    return own


def check_csv_path(path: str, first: list[str], what: str = "--out") -> None:
    """ValueError naming ``path`` unless a CSV may be written there: a new file, or a CSV whose header starts
    with ``first`` (one this command wrote); never a record, a page or a folder."""
    records.check_replaceable(path, what, _is_csv_with(first), "a CSV this command wrote (header "
                              f"{','.join(first)},...)")


def write_csv(table: pd.DataFrame, path: str, what: str = "--out") -> None:
    """``table`` as CSV at ``path``, whole or not at all (a full disk leaves the old file as it was), replacing
    only a CSV of the same columns (``check_csv_path``)."""
    check_csv_path(path, list(table.columns[:2]), what)
    records.write_text_atomic(path, table.to_csv(index=False))
