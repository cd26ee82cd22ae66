"""What is measured: each area's axes per grid, the named sets, and what one call of a case processes.

``GRIDS`` maps a grid (``quick``, ``default``, ``full``) to each area's axes; ``combinations`` lists an
area's cases as dicts, ``select`` picks a subset by value and ``restrict`` by ``--param AXIS=VALUE``;
``PROFILE_SETS`` and ``PARALLEL_GRIDS`` are
the profiled and head-parallel cases; ``tokens`` is what one call of a case processes. The environment
variable ATTENTION_BENCH_GRID picks the grid the asv classes expose ("quick" unless set).
``benchmarks.cases`` builds these cases and re-exports these names.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

#: Tokens per attention call (batch x sequence length held fixed, as FlashAttention's benchmarks do).
TOKENS = {"cpu": 4096, "cuda": 16384}


def thread_counts(all_cores: int | None = None) -> list[int]:
    """1, 2, 4, ... up to all cores, and all cores itself (strong scaling)."""
    n = all_cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1
    counts = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return counts if counts[-1] == n else counts + [n]


#: The modes of the depth area: what each model runs (greedy generation makes seq_len new tokens).
MODES = ("forward", "train_step", "generate")

GRIDS: dict[str, dict[str, dict[str, list]]] = {
    "quick": {
        "attention": {"seq_len": [128, 512], "d_head": [64], "backend": ["math", "sdpa"], "causal": [False, True],
                      "dtype": ["float32"], "device": ["cpu", "cuda"]},
        "multihead": {"heads": [1, 8, 64], "strategy": ["batched", "looped", "sdpa"], "out_proj": [True],
                      "device": ["cpu", "cuda"]},
        "models": {"model": ["transformer", "rnn-width"], "preset": ["tiny"], "seq_len": [16, 64], "batch": [8],
                   "device": ["cpu", "cuda"]},
        "threads": {"workload": ["attention", "multihead", "transformer", "rnn-width"],
                    "threads": sorted({1, thread_counts()[-1]})},
        "layers": {"layer": ["self-attention", "recurrent"], "seq_len": [64, 256], "d_model": [128],
                   "device": ["cpu", "cuda"]},
        "depth": {"model": ["transformer", "rnn-width"], "preset": ["tiny"], "mode": list(MODES), "seq_len": [8, 16],
                  "device": ["cpu"]},
    },
    # What the README's main command measures and reports on: every analysis has its axes, and the
    # CPU half runs in about two minutes on 2 cores.
    "default": {
        "attention": {"seq_len": [128, 256, 512, 1024, 2048], "d_head": [64], "backend": ["math", "sdpa"],
                      "causal": [False], "dtype": ["float32"], "device": ["cpu", "cuda"]},
        "multihead": {"heads": [1, 2, 4, 8, 16, 32, 64], "strategy": ["batched", "looped", "sdpa"],
                      "out_proj": [True, False], "device": ["cpu", "cuda"]},
        "models": {"model": ["transformer", "rnn-width", "rnn-params"], "preset": ["tiny", "paper-base"],
                   "seq_len": [8, 16, 32, 64, 128], "batch": [8], "device": ["cpu", "cuda"]},
        "threads": {"workload": ["attention", "multihead", "transformer", "rnn-width"], "threads": thread_counts()},
        "layers": {"layer": ["self-attention", "recurrent"], "seq_len": [32, 64, 128, 256, 512, 1024],
                   "d_model": [128, 256, 512], "device": ["cpu", "cuda"]},
        "depth": {"model": ["transformer", "rnn-width"], "preset": ["tiny"], "mode": list(MODES),
                  "seq_len": [8, 16, 32, 64], "device": ["cpu"]},
    },
    "full": {
        "attention": {"seq_len": [128, 256, 512, 1024, 2048, 4096, 8192], "d_head": [64, 128],
                      "backend": ["math", "sdpa"], "causal": [False, True],
                      "dtype": ["float32", "float16", "bfloat16"], "device": ["cpu", "cuda"]},
        "multihead": {"heads": [1, 2, 4, 8, 16, 32, 64], "strategy": ["batched", "looped", "sdpa"],
                      "out_proj": [True, False], "device": ["cpu", "cuda"]},
        "models": {"model": ["transformer", "rnn-width", "rnn-params"], "preset": ["tiny", "paper-base"],
                   "seq_len": [16, 32, 64, 128, 256], "batch": [1, 8, 32], "device": ["cpu", "cuda"]},
        "threads": {"workload": ["attention", "multihead", "transformer", "rnn-width"], "threads": thread_counts()},
        "layers": {"layer": ["self-attention", "recurrent"], "seq_len": [16, 32, 64, 128, 256, 512, 1024, 2048],
                   "d_model": [128, 256, 512, 1024], "device": ["cpu", "cuda"]},
        "depth": {"model": ["transformer", "rnn-width"], "preset": ["tiny", "paper-base"], "mode": list(MODES),
                  "seq_len": [8, 16, 32, 64, 128], "device": ["cpu"]},
    },
}

#: The largest sequence length per device for the attention cases (score memory grows as n^2).
MAX_SEQ_LEN = {"cpu": 4096, "cuda": 8192}
MULTIHEAD_SHAPE = {"batch": 8, "seq_len": 256, "d_model": 512}
#: Table 1's layers: sequences per call, and the heads of the self-attention layer
LAYER_BATCH, LAYER_HEADS = 4, 8
GENERATE_STEPS = 16


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
    name = os.environ.get("ATTENTION_BENCH_GRID", "quick")
    if name not in GRIDS:
        raise ValueError(f"ATTENTION_BENCH_GRID={name!r} is not a grid; allowed: {', '.join(GRIDS)}")
    return name


def axes(area: str, grid: str | None = None) -> dict[str, list]:
    grid = active_grid() if grid is None else grid
    if grid not in GRIDS:
        raise ValueError(f"unknown grid {grid!r}; allowed: {', '.join(GRIDS)}")
    if area not in GRIDS[grid]:
        raise ValueError(f"unknown area {area!r}; allowed: {', '.join(GRIDS[grid])}")
    return GRIDS[grid][area]


#: Cases a grid leaves out of its product to keep its cost: the default grid measures the paper-base
#: models (a realistic size, claim C1's second regime) at three lengths only (on two cores the RNN is the
#: faster at 64 and the Transformer at 128), and W_O's absence on one strategy.
SPARSE: dict[str, dict[str, Callable[[dict], bool]]] = {
    "default": {"models": lambda p: p["preset"] != "paper-base" or p["seq_len"] in (16, 64, 128),
                # W_O's cost (out_proj False) is read on the batched strategy only
                "multihead": lambda p: p["out_proj"] or p["strategy"] == "batched"},
}


#: Methods a grid leaves out of a case it keeps: the default grid times paper-base's training step up to n = 64
#: (at n = 128 one step takes 2 s on two cores, and the case is timed in three processes; the full grid has it).
SPARSE_METHODS: dict[str, dict[str, Callable[[dict, str], bool]]] = {
    "default": {"models": lambda p, m: not (m == "train_step" and p["preset"] == "paper-base" and p["seq_len"] > 64)},
}


def method_on_grid(area: str, params: dict, method: str, grid: str | None = None) -> bool:
    """Whether ``grid`` times ``method`` of a case it has (not left out by SPARSE_METHODS)."""
    keep = SPARSE_METHODS.get(active_grid() if grid is None else grid, {}).get(area)
    return keep is None or keep(params, method)


def on_grid(area: str, params: dict, grid: str | None = None) -> bool:
    """Whether a combination of the axes' values is one of the grid's cases (not left out by SPARSE)."""
    keep = SPARSE.get(active_grid() if grid is None else grid, {}).get(area)
    return keep is None or keep(params)


def combinations(area: str, grid: str | None = None) -> list[dict]:
    """Every case of one area in a grid, as {axis: value} dicts."""
    ax = axes(area, grid)
    product = (dict(zip(ax, values, strict=True)) for values in itertools.product(*ax.values()))
    return [p for p in product if on_grid(area, p, grid)]


def select(area: str, grid: str | None = None, **fixed) -> list[dict]:
    """The cases whose axes equal the given values, e.g. ``select("attention", backend="sdpa")``."""
    unknown = set(fixed) - set(axes(area, grid))
    if unknown:
        raise ValueError(f"unknown axes {sorted(unknown)} for area {area!r}; axes: {list(axes(area, grid))}")
    return [c for c in combinations(area, grid) if all(c[k] == v for k, v in fixed.items())]



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

#: The CPU workloads of the strong-scaling area: one fixed case of another area each (claim C1).
THREAD_WORKLOADS = {
    "attention": ("attention", {"seq_len": 512, "d_head": 64, "backend": "sdpa", "causal": False,
                                "dtype": "float32", "device": "cpu"}),
    "multihead": ("multihead", {"heads": 8, "strategy": "batched", "out_proj": True, "device": "cpu"}),
    "transformer": ("models", {"model": "transformer", "preset": "tiny", "seq_len": 64, "batch": 8, "device": "cpu"}),
    "rnn-width": ("models", {"model": "rnn-width", "preset": "tiny", "seq_len": 64, "batch": 8, "device": "cpu"}),
}

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


#: What each area times: forward always; a training step and greedy generation where they exist.
#: The depth area measures no time: its one method records the executed graph (benchmarks.opgraph).
METHODS = {"attention": ("forward",), "multihead": ("forward", "train_step"),
           "models": ("forward", "train_step", "generate"), "threads": ("forward",), "layers": ("forward",),
           "depth": ("graph",)}


def tokens(area: str, params: dict, method: str = "forward") -> int:
    """Tokens one call of ``method`` processes (the throughput denominator), from the case's parameters
    alone, so that results without a record of it (asv's) get the same tokens/s as the runner's."""
    if area == "threads":
        inner, fixed = THREAD_WORKLOADS[params["workload"]]
        return tokens(inner, fixed, method)
    n = params.get("seq_len", MULTIHEAD_SHAPE["seq_len"])
    if area == "attention":
        return max(1, TOKENS[params["device"]] // n) * n
    if area == "multihead":
        return MULTIHEAD_SHAPE["batch"] * n
    if area == "models":
        return params["batch"] * (GENERATE_STEPS if method == "generate" else n)
    if area == "layers":
        return LAYER_BATCH * n
    if area == "depth":
        return DEPTH_BATCH * n
    raise ValueError(f"unknown area {area!r}; allowed: {', '.join(METHODS)}")


#: Sequences per call in the depth area (the executed graph does not depend on the batch).
DEPTH_BATCH = 1
