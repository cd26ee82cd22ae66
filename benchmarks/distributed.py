"""Head-parallel attention over torchrun's ranks (``benchmarks.core.ranks.head_parallel``) into a run folder.

    torchrun --nproc_per_node=1 -m attention_bench ranks --out results/runs/<machine>-parallel
    torchrun --nproc_per_node=2 -m attention_bench ranks --out results/runs/<machine>-parallel
    # across machines, the same command on each (any free port on the first machine's address):
    torchrun --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=<host>:29500 --rdzv_id=<name> \\
             -m attention_bench ranks --out <run folder on the first machine>

Rank 0 writes one record per case (``<out>/cases/parallel--forward--...json``, with ``ranks``,
``backend`` and ``combine`` among its parameters), after every rank has measured it, so runs at
different rank counts share a folder and a rerun resumes.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.distributed as dist

from .core import guards, pipeline
from .core.ranks.head_parallel import AREA, host_names, init, measure_case, plan, record_params, recorded_here
from .core.ranks.world import RankGuard
from .core.records import case_key, commit
from .core.running.lock import FolderBusy
from .core.running.runner import Runner


def run(args: argparse.Namespace) -> int:
    """Every head-parallel case of ``args.grid`` on this torchrun group's ranks, into the run folder
    (``args``: grid, out, machine, min_run_time, backend, as ``attention-bench ranks`` parses them)."""
    # one folder for every rank count, so that the report sets them side by side
    out = pipeline.run_folder(args, "parallel" if args.grid == "default" else f"parallel-{args.grid}")
    try:
        todo = plan(args.grid)
        guards.writable_folder(out, "--out")
        pipeline.one_machine(out, pipeline.machine_name(args))
        backend, device = init(args.backend)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rank, world = dist.get_rank(), dist.get_world_size()
    def all_agree(ok: bool) -> bool:
        flag = torch.tensor([int(ok)], device=device)  # NCCL reduces GPU tensors only
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    try:
        lock = pipeline.hold(out, rank, all_agree)  # one writer per run folder
        if rank == 0:
            pipeline.one_run(out, commit())
    except FolderBusy as error:
        if rank == 0:
            print(f"error: {error}", file=sys.stderr)
        dist.destroy_process_group()
        return 2
    try:
        return _measure(args, out, todo, backend, device, rank, world)
    finally:
        if lock is not None:
            lock.release()


def _measure(args, out: str, todo: list[dict], backend: str, device, rank: int, world: int) -> int:
    """Every case on every rank in lockstep; rank 0 writes each record once all ranks have measured it."""
    hosts = host_names()
    runner = Runner(out, min_run_time=args.min_run_time, name=pipeline.machine_name(args),
                    quick_constants=args.grid == "quick") if rank == 0 else None
    current = [None]
    # a rank that dies mid-run: torchrun stops the others, which say so in one line (RankGuard); the records
    # written so far are whole (rank 0 writes a case's record after every rank has measured it)
    with RankGuard(rank, world, out, lambda: current[0]):
        if runner is not None:
            runner.calibrate([], priced=False)  # the performance model prices no head-parallel case
        counts = {"ok": 0, "skipped": 0, "failed": 0, "oom": 0, "resumed": 0}
        recorded = [recorded_here(runner, todo, world, backend, device) if runner is not None else None]
        dist.broadcast_object_list(recorded, src=0)
        for params, skip in zip(todo, recorded[0], strict=True):
            if skip:
                counts["resumed"] += 1
                continue
            stored = record_params(params, world, backend, device)
            current[0], started = case_key(AREA, "forward", stored), time.time()
            if params["heads"] % world or params["d_model"] % params["heads"]:
                status, reason, metrics = "skipped", f"heads={params['heads']} do not split over {world} ranks", None
            else:
                metrics, status, reason = measure_case(params, device, args.min_run_time), "ok", None
                metrics["hosts"] = len(set(hosts))
            counts[status] += 1
            if runner is not None:
                runner.write(AREA, "forward", stored, status, reason, started, metrics)
        current[0] = None
        dist.barrier()
    if rank == 0:
        print(f"{out}: {world} ranks ({backend}): " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    dist.destroy_process_group()
    return 0

