"""A thread speed-up names the processes that had the cores short (reports.spans_over_processes, analyses.c1_threads):
the control GEMM timed around a case below SHORT of the run's usual rate at its thread count, which the host's other
work causes inside a VM without the VM's CPU counts showing it."""

from __future__ import annotations

import pandas as pd
import pytest

from reports import spans_over_processes, tidy
from reports.analyses import c1_threads

QUIET = {1: 100e9, 2: 190e9}  # the control GEMM's rate on a quiet host, per thread count


def record(workload: str, threads: int, controls: dict[int, float], area: str = "threads") -> dict:
    """A case timed in processes 1-3 (the rounds), each with the control GEMM's rate around it (``controls``, by
    process; QUIET where not given); the 2-thread side 1.6 times faster."""
    return {"area": area, "method": "forward", "status": "ok", "threads": threads,
            "params": {"workload": workload, "threads": threads},
            "rounds": [{"pid": pid, "median_s": 0.016 / (1.6 if threads == 2 else 1.0),
                        "control_flops_per_s": controls.get(pid, QUIET[threads])} for pid in (1, 2, 3)]}


def speedup_rows(records: list[dict]) -> list[dict]:
    times = [{"area": "threads", "method": "forward", "metric": "time", "workload": rec["params"]["workload"],
              "threads": rec["threads"], "value": rec["rounds"][0]["median_s"], "status": "ok", "machine": "m",
              "source": "runner", "unit": "s"} for rec in records if rec["area"] == "threads"]
    return times, spans_over_processes.speedups(records, times)


def test_the_processes_whose_control_ran_short_at_either_thread_count_are_counted():
    # the rest of the run: many quiet rounds at each thread count (the run's usual rate)
    others = [record("other", t, {}, area="attention") for t in (1, 2) for _ in range(10)]
    records = [record("attention", 1, {3: 0.8 * QUIET[1]}), record("attention", 2, {1: 0.6 * QUIET[2]}),
               record("multihead", 1, {}), record("multihead", 2, {2: 0.95 * QUIET[2]}), *others]
    usual = spans_over_processes.usual_controls(records)
    assert usual == pytest.approx(QUIET)
    times, rows = speedup_rows(records)
    short = {r["workload"]: r["short_processes"] for r in rows}
    assert short == {"attention": 2, "multihead": 0}  # process 1 at 2 threads, process 3 at 1; 95% is not short
    assert all(r["value"] == pytest.approx(1.6) for r in rows)  # named, not corrected

    a = c1_threads.analyse(pd.DataFrame(times + rows, columns=tidy.COLUMNS))
    assert "attention 1.60× (" in a.answer and "; cores short in 2 of 3 processes)" in a.answer
    assert a.answer.count("cores short") == 1  # the multihead speed-up's processes were not short
    assert f"below {spans_over_processes.SHORT:.0%} of this run's usual rate" in a.verdict


def test_a_run_with_every_process_quiet_says_nothing_of_it():
    records = [record(w, t, {}) for w in ("attention", "transformer") for t in (1, 2)]
    times, rows = speedup_rows(records)
    assert [r["short_processes"] for r in rows] == [0, 0]
    a = c1_threads.analyse(pd.DataFrame(times + rows, columns=tidy.COLUMNS))
    assert "cores short" not in a.answer and "cores short" not in a.verdict
