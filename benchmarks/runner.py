"""Measure a grid into a run folder, in one process (``benchmarks.core.runner``), resumable.

    python -m benchmarks.runner --grid quick --out results/runs/mine
    python -m benchmarks.runner --grid default --rounds 5 --out results/runs/mine   (interleaved rounds)
    torchrun --nproc_per_node=N -m benchmarks.runner ...    the grid spread over N ranks
"""

from __future__ import annotations

import argparse
import sys

from . import cases
from .core import pipeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.runner", description=__doc__.split("\n\n")[0])
    pipeline.add_run_options(parser, cases.GRIDS, default_grid="quick")
    parser.add_argument("--area", action="append", help="restrict to an area (repeatable)")
    parser.add_argument("--device", action="append", help="restrict to a device: cpu or cuda (repeatable)")
    args = parser.parse_args(argv)
    try:
        run = pipeline.plan_run(args, args.area)
    except pipeline.FolderBusy as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        parser.error(str(error))
    try:
        _, total = pipeline.measure_grid(run, progress=not args.no_progress)
    except (KeyboardInterrupt, OSError) as error:
        return run.stopped(error)
    finally:
        run.release()
    if run.ranks.world > 1 and run.ranks.rank == 0:
        print(f"all {run.ranks.world} ranks: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
