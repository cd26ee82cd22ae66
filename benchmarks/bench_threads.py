"""The threads area: strong scaling on the CPU, fixed cases of other areas on 1, 2, 4, ... all cores (claim C1:
how much of the Transformer's parallelism one machine's cores turn into speed, against the RNN's)."""

from . import bench_attention, bench_models, bench_multihead
from .area import Area, Prepared, Skip
from .common import _CaseBenchmark
from .grids import grid_thread_counts, thread_counts

#: The workloads: one fixed CPU case of another area each.
WORKLOADS = {
    "attention": (bench_attention.AREA, {"seq_len": 512, "d_head": 64, "backend": "sdpa", "causal": False,
                                         "dtype": "float32", "device": "cpu"}),
    "multihead": (bench_multihead.AREA, {"heads": 8, "strategy": "batched", "out_proj": True, "device": "cpu"}),
    "transformer": (bench_models.AREA, {"model": "transformer", "preset": "tiny", "seq_len": 64, "batch": 8,
                                        "device": "cpu"}),
    "rnn-width": (bench_models.AREA, {"model": "rnn-width", "preset": "tiny", "seq_len": 64, "batch": 8,
                                      "device": "cpu"}),
}


def workload(name: str) -> tuple[str, dict]:
    """The (area, params) a workload runs."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; allowed: {', '.join(WORKLOADS)}")
    area, params = WORKLOADS[name]
    return area.name, dict(params)


def tokens(params: dict, method: str = "forward") -> int:
    area, fixed = WORKLOADS[params["workload"]]
    return area.tokens(fixed, method)


def build(workload: str, threads: int) -> Prepared:
    """One fixed CPU case (WORKLOADS) run on ``threads`` threads: strong scaling (claim C1)."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; allowed: {', '.join(WORKLOADS)}")
    available = thread_counts()[-1]
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int; got {threads!r}")
    if threads > available:
        raise Skip(f"threads {threads} is above this machine's {available} cores")
    area, params = WORKLOADS[workload]
    prepared = area.build(**params)
    prepared.train_step = prepared.generate = prepared.generate_flops = prepared.generate_tokens = None
    prepared.threads = threads
    return prepared


AREA = Area(
    name="threads",
    axes={grid: {"workload": list(WORKLOADS), "threads": grid_thread_counts(grid)}
          for grid in ("quick", "default", "full")},
    build=build,
    tokens=tokens,
)


class ThreadScaling(_CaseBenchmark):
    AREA = AREA
