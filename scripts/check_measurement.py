"""Measurement quality of the in-process runner, measured side by side in one run.

1. Repeatability: the grid's CPU cases are measured twice by the runner (two fresh output folders);
   for every timed method above 1 ms it prints the ratio of the two medians and how many agree
   within 5%.
2. Agreement: every such method is timed again by a plain torch.utils.benchmark
   ``Timer.blocked_autorange`` on a freshly built case, alternating with the runner's own
   ``measure.measure``; it prints the ratio of the medians and how many agree within 5%.

A control measures a plain 1024x1024 GEMM before and after each phase; if it varies by more than
the tolerance itself the machine is not quiet, and the verdict says so instead of passing or failing.

    .venv/bin/python scripts/check_measurement.py [--grid quick] [--min-run-time 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
import torch.utils.benchmark as tbench

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from attention_bench import options  # noqa: E402
from benchmarks import cases  # noqa: E402
from benchmarks.core.hardware import machine
from benchmarks.core.records import case_key  # noqa: E402
from benchmarks.core.running import runner
from benchmarks.core.timing import measure

TOLERANCE = 0.05
MIN_TIME_S = 1e-3


def sweep(todo, out: str, min_run_time: float) -> dict[str, dict]:
    r = runner.Runner(out, min_run_time=min_run_time)
    r.run(todo, progress=False)
    folder = os.path.join(out, "cases")
    recs = [json.load(open(os.path.join(folder, f))) for f in os.listdir(folder)]
    return {case_key(x["area"], x["method"], x["params"]): x for x in recs if x["status"] == "ok"}


def summarize(title: str, ratios: dict[str, float]) -> bool:
    within = {k: r for k, r in ratios.items() if abs(r - 1) <= TOLERANCE}
    worst = sorted(ratios.items(), key=lambda kv: -abs(kv[1] - 1))[:5]
    print(f"\n{title}: {len(within)}/{len(ratios)} within {TOLERANCE:.0%}; "
          f"median ratio {statistics.median(ratios.values()):.3f}")
    for key, r in worst:
        print(f"    {r:6.3f}  {key}")
    return len(within) == len(ratios)


def reference(area: str, params: dict, method: str, min_run_time: float, rounds: int = 3) -> tuple[float, float]:
    """(runner median, blocked_autorange median), each the median of ``rounds`` alternating rounds."""
    torch.manual_seed(0)
    case = cases.build(area, params)
    fn, _, _ = case.work(method)
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(measure.measure(case, method, min_run_time=min_run_time)["time_median_s"])
        with cases.using_threads(case.threads):
            timer = tbench.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
            theirs.append(timer.blocked_autorange(min_run_time=min_run_time).median)
    return statistics.median(ours), statistics.median(theirs)


def control(rates: list[float], times: int = 3) -> None:
    """Append GEMM rates of a fixed size: the machine's own noise, independent of the suite."""
    rates.extend(machine.gemm_flops_per_s(1024, min_run_time=0.3) for _ in range(times))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/check_measurement.py", description=__doc__.split("\n\n")[0])
    options.add(p, "--grid", "--min-run-time", "--threads")  # --threads 1: no OpenMP sensitivity to a busy core
    return p


def main() -> int:
    args = parser().parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    todo = runner.plan(args.grid, devices=["cpu"])
    rates: list[float] = []
    control(rates)
    with tempfile.TemporaryDirectory() as tmp:
        first = sweep(todo, os.path.join(tmp, "a"), args.min_run_time)
        control(rates)
        second = sweep(todo, os.path.join(tmp, "b"), args.min_run_time)
        control(rates)
    timed = {k: v for k, v in first.items() if v["time_median_s"] >= MIN_TIME_S and k in second}
    repeat = {k: second[k]["time_median_s"] / v["time_median_s"] for k, v in timed.items()}
    ok_repeat = summarize(f"Two runs of the {args.grid} grid (second/first median, cases >= 1 ms)", repeat)

    agree = {}
    for key, rec in timed.items():
        ours, theirs = reference(rec["area"], rec["params"], rec["method"], args.min_run_time)
        agree[key] = ours / theirs
    ok_agree = summarize("Runner vs torch.utils.benchmark blocked_autorange (ratio of medians)", agree)
    control(rates)
    spread = max(rates) / min(rates)
    quiet = spread - 1 <= TOLERANCE
    print(f"\nControl GEMM (1024^3, {len(rates)} measurements over the run): {min(rates) / 1e9:.0f}.."
          f"{max(rates) / 1e9:.0f} GFLOP/s, max/min {spread:.2f}: the machine was {'' if quiet else 'NOT '}quiet")
    verdict = "PASS" if ok_repeat and ok_agree else ("FAIL" if quiet else "INCONCLUSIVE (noisy machine)")
    print(f"{verdict} (tolerance {TOLERANCE:.0%}, min_run_time {args.min_run_time} s, "
          f"{torch.get_num_threads()} threads)")
    return 0 if verdict == "PASS" else (1 if quiet else 2)


if __name__ == "__main__":
    sys.exit(main())
