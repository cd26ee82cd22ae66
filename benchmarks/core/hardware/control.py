"""The control: a small GEMM timed for a moment, whose rate says how fast a shared machine runs right then.

The timing interleaves it with every CPU measurement (``core.timing.measure``), and the constants' calibration
with each of its parts (``constants.measure``), so that a case and the constants it is priced with can be set at
one speed: the performance model's prediction of a case is scaled by the constants' control over the case's
(``reports.tidy``). Both are timed here, alike.
"""

from __future__ import annotations

import contextlib

import torch
import torch.utils.benchmark as tbench
from torch.utils.benchmark.utils import common as tbench_common

#: a (CONTROL_SIZE)^2 float32 matmul timed for about CONTROL_TIME seconds
CONTROL_SIZE, CONTROL_TIME = 256, 0.01


@contextlib.contextmanager
def threads_left_alone():
    """torch.utils.benchmark's Timer calls ``torch.set_num_threads`` around every measurement; inside this
    block it does not when the count is already the one asked for, so that timing a case leaves the process
    in the regime its user gets (``area.using_threads`` says why that matters)."""
    real = tbench_common.set_torch_threads
    tbench_common.set_torch_threads = lambda n: contextlib.nullcontext() if n == torch.get_num_threads() else real(n)
    try:
        yield
    finally:
        tbench_common.set_torch_threads = real


def gemm_timer(size: int, device: str, dtype: str) -> tbench.Timer:
    """A Timer of one (size x size) @ (size x size) matmul on its own random operands, run once (warm)."""
    dev = torch.device(device)
    a, b = (torch.randn(size, size, device=dev, dtype=getattr(torch, dtype)) for _ in range(2))
    stmt = (lambda: torch.mm(a, b)) if dev.type == "cpu" else (lambda: (torch.mm(a, b), torch.cuda.synchronize(dev)))
    stmt()
    return tbench.Timer(stmt="stmt()", globals={"stmt": stmt}, num_threads=torch.get_num_threads())


def gemm_flops_per_s_within(size: int, seconds: float) -> float:
    """FLOP/s of a CPU (size x size) matmul over one block of calls lasting about ``seconds``, sized from one
    call: a control that costs what it says (blocked_autorange grows its blocks to at least 10 ms and then
    times one more, whatever ``min_run_time`` asks)."""
    timer = gemm_timer(size, "cpu", "float32")
    with threads_left_alone():
        one = timer.timeit(1).median
        calls = max(1, round(seconds / one))
        return 2 * size**3 / timer.timeit(calls).median


def control_flops_per_s() -> float:
    """The control's rate now: CONTROL_SIZE for CONTROL_TIME."""
    return gemm_flops_per_s_within(CONTROL_SIZE, CONTROL_TIME)
