"""Estimate how long `asv run` (not --quick) takes over a grid, from per-call times the in-process runner
measured on the same machine, and asv 0.6's sampling rules. A lower bound: building each case (model
initialisation) and asv's own bookkeeping are not counted.

asv runs every benchmark method x parameter combination in its own (forked) process, and calls setup
there; ours warms the case up with one forward call. A time_ benchmark runs 2 rounds, each a 0.1 s
warm-up and up to 5 samples of at least 10 ms, stopping after 10 s. track_achieved_flops_per_s and
track_fraction_of_peak time 0.2 s each (torch.utils.benchmark); the five GPU tracks skip after setup.

    .venv/bin/python scripts/estimate_asv_duration.py results/runs/<machine>-full
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import pkgutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pandas as pd  # noqa: E402

import benchmarks  # noqa: E402
from attention_bench import options  # noqa: E402
from benchmarks import cases  # noqa: E402
from reports import tidy  # noqa: E402

ROUNDS, WARMUP, SAMPLES, SAMPLE_TIME, ROUND_CAP = 2, 0.1, 5, 0.01, 10.0
TRACK_TIME, SETUP_ONLY_METHODS = 0.2, 6  # matmul-FLOPs track + five GPU tracks: setup, then (almost) nothing
#: seconds of asv bookkeeping per benchmark process (fork, setup, result files): `asv run -E existing --quick`
#: over the quick grid took 65 s for its 634 method x combination processes on the 2-core VM
PER_PROCESS = 0.10


def processes(grid: str) -> int:
    """asv benchmark processes over a grid: every method of every class times every combination."""
    count = 0
    for m in pkgutil.iter_modules(benchmarks.__path__):
        if m.name.startswith("bench_"):
            for name, cls in vars(importlib.import_module(f"benchmarks.{m.name}")).items():
                if isinstance(cls, type) and not name.startswith("_") and cls.__module__.endswith(m.name):
                    methods = [x for x in dir(cls) if x.startswith(("time_", "track_", "peakmem_"))]
                    count += _combinations(cls, grid) * len(methods)
    return count


def _combinations(cls, grid: str) -> int:
    """The parameter combinations asv runs a class over: a grid area's cases, or the class's own params (the
    head-parallel class, the GEMM calibration)."""
    if getattr(cls, "area", None) in cases.GRIDS[grid]:
        return len(cases.combinations(cls.area, grid))
    params = getattr(cls, "params", ())
    params = params if params and isinstance(params[0], (list, tuple)) else [params]
    return math.prod(len(p) for p in params) if params and params[0] else 1


def time_benchmark(setup: float, t: float) -> float:
    return ROUNDS * (setup + WARMUP + min(SAMPLES * max(t, SAMPLE_TIME), ROUND_CAP + t))


def case_seconds(times: dict[str, float]) -> float:
    forward = times["forward"]
    total = sum(time_benchmark(forward, t) for t in times.values())  # time_forward, time_train_step, ...
    total += 2 * forward  # peakmem_forward: setup + one call
    total += 2 * (forward + max(TRACK_TIME, 2 * forward))  # achieved FLOP/s and fraction of peak
    total += SETUP_ONLY_METHODS * forward
    return total


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/estimate_asv_duration.py", description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a run folder measured over the grid to estimate (--grid: the grid it measured)")
    options.add(p, "--grid")
    return p


def main() -> int:
    args = parser().parse_args()
    t = tidy.load([args.run])
    times = t[(t.metric == "time") & (t.status == "ok") & (t.area != "gemm")].copy()
    times.loc[times.area != "threads", "threads"] = pd.NA  # the thread count is an axis of that area only
    params = [c for c in tidy.PARAMS if c in times and times[c].notna().any()]
    total, n = 0.0, 0
    for _, g in times.groupby(["area", *params], dropna=False):
        per_method = g.groupby("method").value.median().to_dict()
        if "forward" in per_method:
            total += case_seconds(per_method)
            n += 1
    skipped = (t[(t.metric == "time") & (t.status == "skipped")].groupby(["area", *params], dropna=False).ngroups)
    procs = processes(args.grid)
    print(f"{n} measured CPU cases in {args.run} ({skipped} more skipped): asv run (not --quick) over the "
          f"{args.grid!r} grid would take about {(total + procs * PER_PROCESS) / 60:.0f} min on this machine: "
          f"{total / 60:.0f} min timing and warming up, {procs * PER_PROCESS / 60:.0f} min for {procs} benchmark "
          f"processes (CUDA ones included). A lower bound: building the models is not counted.")
    print("Cases per area:", ", ".join(f"{a} {g[params].drop_duplicates().shape[0]}"
                                        for a, g in times.groupby("area")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
