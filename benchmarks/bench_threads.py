"""Strong scaling on the CPU: fixed workloads on 1, 2, 4, ... all cores (claim C1's parallelism)."""

from .common import _CaseBenchmark, grid_params


class ThreadScaling(_CaseBenchmark):
    area = "threads"
    params, param_names = grid_params(area)
