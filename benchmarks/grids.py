"""The grids and the named sets of cases: what belongs to no one area.

``GRID_NAMES`` are the grids every area gives axes for (``benchmarks/bench_<area>.py``); ``active_grid`` is the
grid the asv classes expose (the environment variable ATTENTION_BENCH_GRID, "quick" unless set);
``thread_counts`` the strong-scaling axis; ``restrict`` picks planned cases by ``--param AXIS=VALUE``;
``PROFILE_SETS`` and ``PARALLEL_GRIDS`` are the profiled and the head-parallel cases.
"""

from __future__ import annotations

import os


def thread_counts(all_cores: int | None = None) -> list[int]:
    """1, 2, 4, ... up to all cores, and all cores itself (strong scaling)."""
    n = all_cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1
    counts = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return counts if counts[-1] == n else counts + [n]


#: The grids, smallest first: ``quick`` (seconds: the tests and the gate), ``default`` (the README's main job:
#: every analysis has its axes; the CPU half runs in about two minutes on 2 cores) and ``full``.
GRID_NAMES = ("quick", "default", "full")


def grid_thread_counts(grid: str) -> list[int]:
    """The thread counts a grid measures: one thread and all cores on ``quick``, every power of two between
    on the others (the strong-scaling axis, and the GEMM peaks calibrated for it)."""
    return sorted({1, thread_counts()[-1]}) if grid == "quick" else thread_counts()


#: The head-parallel cases (benchmarks.distributed, launched with torchrun): the module split over the
#: ranks, how the heads are combined, and the problem. Strong scaling holds a case fixed while the
#: ranks grow; weak scaling compares h heads on 1 rank with h x ranks heads on that many.
PARALLEL_GRIDS: dict[str, dict[str, list]] = {
    "quick": {"layer": ["attention"], "combine": ["allreduce", "allgather"], "heads": [4, 8], "seq_len": [64],
              "d_model": [64], "batch": [2]},
    "default": {"layer": ["attention", "encoder_layer"], "combine": ["allreduce", "allgather"], "heads": [8, 16],
                "seq_len": [128, 512], "d_model": [512], "batch": [4]},
}


def active_grid() -> str:
    """The grid the asv classes expose: ATTENTION_BENCH_GRID, "quick" unless set."""
    name = os.environ.get("ATTENTION_BENCH_GRID", "quick")
    if name not in GRID_NAMES:
        raise ValueError(f"ATTENTION_BENCH_GRID={name!r} is not a grid; allowed: {', '.join(GRID_NAMES)}")
    return name


def restrict(planned: list[tuple[str, dict]], given: list[str], grid: str) -> list[tuple[str, dict]]:
    """The planned (area, params) cases whose axes have every ``AXIS=VALUE`` of ``given`` (``--param``);
    ValueError naming a pair that is not AXIS=VALUE, an axis the planned cases do not have or a value the
    grid never gives it, each with what is allowed."""
    wanted = {}
    for pair in given:
        axis, eq, value = pair.partition("=")
        if not eq or not axis:
            raise ValueError(f"--param {pair!r}: give AXIS=VALUE, e.g. backend=sdpa")
        known = sorted({a for _, p in planned for a in p})
        if axis not in known:
            raise ValueError(f"--param {pair!r}: no axis {axis!r} in the chosen cases of grid {grid!r}; "
                             f"allowed: {', '.join(known)}")
        values = sorted({str(p[axis]) for _, p in planned if axis in p})
        if value not in values:
            raise ValueError(f"--param {pair!r}: {axis} is never {value!r} on grid {grid!r}; allowed: "
                             f"{', '.join(values)}")
        wanted[axis] = value
    return [(area, p) for area, p in planned if all(str(p.get(axis)) == value for axis, value in wanted.items())]

#: Named sets of cases for ``attention-bench profile --set``: (area, params, method). "default" is
#: what the README's main command profiles: both models at the tiny and the paper-base size (the two
#: regimes of claim C1), the heads at both ends of h for each strategy (C3/C4), and equation (1) written
#: out at a long sequence (what holds the memory).
PROFILE_SETS: dict[str, list[tuple[str, dict, str]]] = {
    "quick": [
        ("models", {"model": m, "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"}, "forward")
        for m in ("transformer", "rnn-width")
    ] + [("multihead", {"heads": 8, "strategy": "batched", "out_proj": True, "device": "cpu"}, "forward")],
    "default": [
        ("models", {"model": m, "preset": p, "seq_len": n, "batch": 8, "device": "cpu"}, "forward")
        for p, n in (("tiny", 128), ("paper-base", 64)) for m in ("transformer", "rnn-width")
    ] + [
        ("multihead", {"heads": h, "strategy": s, "out_proj": True, "device": "cpu"}, "forward")
        for s in ("batched", "looped", "sdpa") for h in (1, 64)
    ] + [
        ("attention", {"seq_len": 1024, "d_head": 64, "backend": b, "causal": False, "dtype": "float32",
                       "device": "cpu"}, "forward") for b in ("math", "sdpa")
    ],
}


def profile_set(name: str) -> list[tuple[str, dict, str]]:
    if name not in PROFILE_SETS:
        raise ValueError(f"unknown profile set {name!r}; allowed: {', '.join(PROFILE_SETS)}")
    return PROFILE_SETS[name]
