"""Head-parallel attention measured over ranks: what splitting the heads costs and what it buys.

    torchrun --nproc_per_node=1 -m benchmarks.distributed --out results/runs/<machine>-parallel
    torchrun --nproc_per_node=2 -m benchmarks.distributed --out results/runs/<machine>-parallel
    # across machines, the same command on each (any free port on the first machine's address):
    torchrun --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=<host>:29500 --rdzv_id=<name> \\
             -m benchmarks.distributed --out <run folder on the first machine>

Each case of ``cases.PARALLEL_GRIDS`` (layer: one attention or a whole encoder layer; how the heads are
combined; heads, n, d_model, batch) is built from the same seeded single-device module on every rank
and split with ``transformer.parallel``. Every rank then runs the same number of calls in lockstep:

- ``time``: the head-parallel forward, end to end (the slowest rank's median);
- ``compute_s``: the same forward with the collectives left out (each rank's share of the work);
- ``comm_s``: the collectives alone, on tensors of the shapes the forward sends; ``comm_bytes``: what
  they carry per rank (all-reduce of the output; all-gather of the heads) by the ring algorithms'
  count, ``comm_bytes_measured``: what each rank actually sent, read from the network interfaces'
  counters (gloo; None for NCCL);
- ``comm_share``: the collectives' share of the forward's work, comm / (compute + comm), per block and
  its median: the three are timed in the same blocks, in mirrored order (``lockstep_blocks``), so a
  slow moment of the machine falls on all three and the share lies in (0, 1) by construction.

Rank 0 writes one record per case into the run folder (``<out>/cases/parallel--forward--...json``,
with ``ranks``, ``backend`` and ``combine`` among its parameters), so runs at different rank counts
share a folder and ``reports build`` sets them side by side (strong scaling: the same case over ranks;
weak scaling: h heads on 1 rank against h x ranks heads on that many). gloo on CPUs, NCCL on GPUs (one
rank per GPU). Each rank gets cores / local ranks threads, so a run at any rank count uses the same
cores.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# a module, its names read when called: asv runs this suite against older commits of transformer
from transformer import MultiHeadAttention, parallel
from transformer.layers import EncoderLayer

from ... import cases
from ..records import read_json, write_json_atomic

AREA = "parallel"
#: timed blocks per measurement: the end-to-end time's quartiles are over them (its ``samples``)
REPEATS = 5


def init(backend: str | None) -> tuple[str, torch.device]:
    """Join torchrun's process group; (backend, this rank's device). Errors name the value and what is allowed."""
    if "RANK" not in os.environ:
        raise ValueError("no torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR): launch with "
                         "torchrun --nproc_per_node=N -m attention_bench ranks ...")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"unknown backend {backend!r}; allowed: 'gloo' (CPU), 'nccl' (GPU)")
    if backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("--backend nccl needs a CUDA device; this machine has none (use gloo)")
    if not dist.is_available() or not dist.is_backend_available(backend):
        raise ValueError(f"torch.distributed backend {backend!r} is not available in this torch build")
    local = int(os.environ.get("LOCAL_RANK", 0))
    if backend == "nccl" and local >= torch.cuda.device_count():
        raise ValueError(f"--backend nccl needs one GPU per rank on a machine: local rank {local}, but "
                         f"{torch.cuda.device_count()} GPU(s) here (launch at most that many ranks per machine, "
                         f"or use --backend gloo)")
    device = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:  # the same cores at every rank count: each rank a share of them
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", 1))))
    dist.init_process_group(backend)
    return backend, device


def plan(grid: str) -> list[dict]:
    if grid not in cases.PARALLEL_GRIDS:
        raise ValueError(f"unknown grid {grid!r}; allowed: {', '.join(cases.PARALLEL_GRIDS)}")
    axes = cases.PARALLEL_GRIDS[grid]
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def build(params: dict, device: torch.device):
    """(head-parallel module, input, [(collective, tensor shape)] its forward sends)."""
    torch.manual_seed(0)
    d, h, world = params["d_model"], params["heads"], dist.get_world_size()
    x = torch.randn(params["batch"], params["seq_len"], d, device=device)
    out_shape = tuple(x.shape)
    heads_shape = (*x.shape[:-1], d // world)
    attention = [("all_reduce", out_shape)] if params["combine"] == "allreduce" else [("all_gather", heads_shape)]
    if params["layer"] == "attention":
        single = MultiHeadAttention(d, h, strategy="sdpa", device=device)
        return parallel.HeadParallelMultiHeadAttention.from_single(single, params["combine"]).eval(), x, attention
    single = EncoderLayer(d, h, 4 * d, device=device)
    layer = parallel.HeadParallelEncoderLayer.from_single(single, params["combine"]).eval()
    return layer, x, attention + [("all_reduce", out_shape)]


def collectives(sends: list[tuple[str, tuple]], device) -> tuple[callable, int]:
    """A function that runs the forward's collectives alone, and the bytes they carry per rank."""
    world = dist.get_world_size()
    tensors = [(op, torch.randn(shape, device=device)) for op, shape in sends]
    outs = {id(t): [torch.empty_like(t) for _ in range(world)] for op, t in tensors if op == "all_gather"}

    def run():
        for op, t in tensors:
            if op == "all_reduce":
                dist.all_reduce(t)
            else:
                dist.all_gather(outs[id(t)], t)

    # per rank, as NCCL's and gloo's ring algorithms move them: all-reduce 2(w-1)/w of the payload,
    # all-gather (w-1) slices of the output
    moved = sum((2 * (world - 1) / world) * t.numel() * t.element_size() if op == "all_reduce"
                else (world - 1) * t.numel() * t.element_size() for op, t in tensors)
    return run, int(moved)


def _sent_bytes() -> int | None:
    """Bytes this machine's network interfaces have sent so far, loopback included (Linux sysfs)."""
    total = None
    for path in glob.glob("/sys/class/net/*/statistics/tx_bytes"):
        try:
            with open(path) as f:
                total = (total or 0) + int(f.read())
        except (OSError, ValueError):
            return None
    return total


def host_names() -> list[str]:
    """Every rank's host name, by rank: ranks on one machine share its cores and its network interfaces."""
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    return hosts


def wire_bytes(fn, device, calls: int = 10) -> float | None:
    """Bytes each rank sent per call of ``fn`` (the forward's collectives alone), measured on the network
    interfaces: each machine's first rank reads its counters around ``calls`` calls, the machines' totals
    are summed and divided by the ranks and the calls. Includes TCP/IP headers and whatever else the
    machine sent meanwhile. None for NCCL (GPU traffic does not cross these interfaces) or without sysfs.
    A machine is a host name, not a torchrun node: two nodes on one machine share its interfaces."""
    if device.type != "cpu":
        return None
    hosts = host_names()
    reader = hosts.index(hosts[dist.get_rank()]) == dist.get_rank()
    fn()
    dist.barrier()
    start = _sent_bytes() if reader else 0
    dist.barrier()
    for _ in range(calls):
        fn()
    dist.barrier()
    end = _sent_bytes() if reader else 0
    unread = None in (start, end)
    sent = torch.tensor([0 if unread else end - start, int(unread)], dtype=torch.float64)
    dist.all_reduce(sent)
    return None if sent[1] else sent[0].item() / dist.get_world_size() / calls


def lockstep_blocks(fns: dict[str, Callable], device, min_run_time: float, repeats: int = REPEATS,
                    local: frozenset = frozenset()) -> dict[str, list[float]]:
    """Seconds per call of each function in each of ``repeats`` blocks. Within a block every function runs
    its calls in turn, in mirrored order from one block to the next (A B C, C B A, ...), so that a shared
    machine's slow moments fall on all of them alike and their ratios hold; every rank runs the same number
    of calls (rank 0's choice, broadcast), so that collectives inside them always meet. The functions named
    in ``local`` run with the collectives left out (``parallel.local_only``)."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)

    def run(name, calls):
        with parallel.local_only() if name in local else contextlib.nullcontext():
            for _ in range(calls):
                fns[name]()
            sync()

    calls = {}
    for name in fns:
        run(name, 1)
        dist.barrier()
        start = time.perf_counter()
        run(name, 1)
        calls[name] = max(1, int(min_run_time / repeats / max(time.perf_counter() - start, 1e-6)))
    shared = [calls]
    dist.broadcast_object_list(shared, src=0)
    calls, times = shared[0], {name: [] for name in fns}
    for block in range(repeats):
        for name in (list(fns) if block % 2 == 0 else list(fns)[::-1]):
            dist.barrier()
            start = time.perf_counter()
            run(name, calls[name])
            times[name].append((time.perf_counter() - start) / calls[name])
    return times


def slowest(values: list[float], device) -> list[float]:
    """Each value's maximum over the ranks: a parallel step takes as long as its slowest rank."""
    t = torch.tensor(values, dtype=torch.float64, device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def measure_case(params: dict, device, min_run_time: float) -> dict:
    module, x, sends = build(params, device)
    with torch.no_grad():
        module(x)  # the inputs checked once on every rank; then the layer is timed without the check
        for m in module.modules():
            if isinstance(m, parallel.HeadParallelMultiHeadAttention):
                m.check_shapes = False
        comm_fn, moved = collectives(sends, device)
        forward = lambda: module(x)  # noqa: E731
        blocks = lockstep_blocks({"forward": forward, "compute": forward, "comm": comm_fn}, device, min_run_time,
                                 local=frozenset({"compute"}))
        wire = wire_bytes(comm_fn, device) if dist.get_world_size() > 1 else 0.0
    q25, total, q75 = np.percentile(blocks["forward"], [25, 50, 75]).tolist()
    # each block's share of the collectives in the forward's work, its slowest rank's
    shares = slowest([c / (c + w) for c, w in zip(blocks["comm"], blocks["compute"], strict=True)], device)
    q25, total, q75, compute, comm = slowest(
        [q25, total, q75, statistics.median(blocks["compute"]), statistics.median(blocks["comm"])], device)
    tokens = params["batch"] * params["seq_len"]
    return {"time_median_s": total, "time_q25_s": q25, "time_q75_s": q75, "time_iqr_s": q75 - q25,
            "samples": len(blocks["forward"]),
            "compute_s": compute, "comm_s": comm, "comm_share": statistics.median(shares), "comm_bytes": moved,
            "comm_bytes_measured": wire,
            "tokens": tokens, "tokens_per_s": tokens / total, "threads": torch.get_num_threads()}


def _spawned(rank: int, world: int, store: str, params: dict, min_run_time: float, result: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        metrics = measure_case(params, torch.device("cpu"), min_run_time)
        if rank == 0:
            write_json_atomic(result, metrics)
    finally:
        dist.destroy_process_group()


def spawn_measure(params: dict, ranks: int, min_run_time: float = 0.2) -> dict:
    """One case measured on ``ranks`` gloo processes started here (torch.multiprocessing, for asv, which
    runs each benchmark in a process of its own); the metrics measure_case returns."""
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        mp.start_processes(_spawned, args=(ranks, os.path.join(tmp, "store"), params, min_run_time, result),
                           nprocs=ranks, start_method="spawn")
        return read_json(result)


def record_params(params: dict, world: int, backend: str, device) -> dict:
    """A case's parameters as its record stores them: the grid's axes, and where it ran."""
    return {**params, "ranks": world, "backend": backend, "device": device.type}


def recorded_here(runner, todo: list[dict], world: int, backend: str, device) -> list[bool]:
    """For each case, whether the folder already holds its record at this commit (a rerun resumes); unlike
    the runner, a rerun tries a failed case again (a rank lost to a network hiccup)."""
    def done(p):
        _, rec = runner.recorded(AREA, "forward", record_params(p, world, backend, device))
        return rec is not None and rec.get("status") == "ok"

    return [done(p) for p in todo]
