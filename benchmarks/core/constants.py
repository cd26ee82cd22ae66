"""A machine's constants, measured by micro-benchmarks and never fitted to the suite's cases: the GEMM rate
over a small grid of shapes (square, thin and the batched shapes attention runs), the memory bandwidth of a
STREAM-style copy and triad on arrays far beyond the last-level cache, and the time one tiny operator costs
(on a GPU, the launch latency). A performance model (``perfmodel``) predicts a case from these alone.

    measure(device)   every constant of one device, at the current thread count (a dict, JSON-ready)
"""

from __future__ import annotations

import torch
import torch.utils.benchmark as tb

#: (batch, m, n, k) per device: square GEMMs from small to large, the thin ones of a projection over few
#: tokens, and the batched ones of attention's scores (n x d_head by d_head x n) and its weights times V
GEMM_SHAPES = {
    "cpu": ((1, 64, 64, 64), (1, 256, 256, 256), (1, 1024, 1024, 1024), (1, 2048, 2048, 2048),
            (1, 4096, 64, 64), (1, 512, 2048, 512), (64, 128, 128, 64), (64, 128, 64, 128), (64, 512, 512, 64)),
    "cuda": ((1, 256, 256, 256), (1, 1024, 1024, 1024), (1, 4096, 4096, 4096), (1, 8192, 8192, 8192),
             (1, 16384, 64, 64), (1, 4096, 16384, 4096), (256, 512, 512, 64), (256, 512, 64, 512),
             (64, 2048, 2048, 128)),
}
#: elements of each STREAM array (float32): 256 MiB on the CPU, far beyond any last-level cache; 1 GiB on a GPU
STREAM_ELEMENTS = {"cpu": 64 * 2**20, "cuda": 256 * 2**20}
#: tiny operators timed back to back for the per-operator overhead
TINY_OPS = 1000


def _seconds(stmt, min_run_time: float) -> float:
    """Median seconds of one call of ``stmt`` (torch.utils.benchmark, which synchronizes CUDA)."""
    return tb.Timer(stmt="stmt()", globals={"stmt": stmt}).blocked_autorange(min_run_time=min_run_time).median


def gemm_rates(device: str = "cpu", dtype: str = "float32", shapes=None, min_run_time: float = 0.1) -> list[dict]:
    """FLOP/s of ``torch.matmul`` at each (batch, m, n, k) of ``shapes`` (default GEMM_SHAPES[device])."""
    out = []
    for batch, m, n, k in shapes or GEMM_SHAPES[device]:
        dt = getattr(torch, dtype)
        a = torch.randn(batch, m, k, device=device, dtype=dt)
        b = torch.randn(batch, k, n, device=device, dtype=dt)
        seconds = _seconds(lambda a=a, b=b: torch.matmul(a, b), min_run_time)
        out.append({"batch": batch, "m": m, "n": n, "k": k, "flops": 2 * batch * m * n * k,
                    "flops_per_s": 2 * batch * m * n * k / seconds})
    return out


def bandwidth(device: str = "cpu", elements: int | None = None, min_run_time: float = 0.2) -> dict[str, float]:
    """Bytes per second (read plus written) of a STREAM copy (b = a: 8 bytes an element) and triad
    (a = b + s c: 12 bytes an element), float32."""
    n = elements or STREAM_ELEMENTS[device]
    a, b, c = (torch.rand(n, device=device) for _ in range(3))
    copy = _seconds(lambda: b.copy_(a), min_run_time)
    triad = _seconds(lambda: torch.add(b, c, alpha=3.0, out=a), min_run_time)
    return {"copy_bytes_per_s": 8 * n / copy, "triad_bytes_per_s": 12 * n / triad}


def op_overhead(device: str = "cpu", ops: int = TINY_OPS, min_run_time: float = 0.2) -> float:
    """Seconds one operator costs beyond its work: ``ops`` additions of one-element tensors, back to back."""
    x, y, z = (torch.ones(1, device=device) for _ in range(3))

    def tiny():
        for _ in range(ops):
            torch.add(x, y, out=z)

    return _seconds(tiny, min_run_time) / ops


def measure(device: str = "cpu", dtype: str = "float32", quick: bool = False) -> dict:
    """Every constant of ``device`` at the current thread count: the GEMM rate by shape, the bandwidth and
    the per-operator overhead. ``quick``: two small shapes, 4 MiB arrays, short timings (for tests)."""
    run_time = 0.02 if quick else 0.2
    return {"device": device, "dtype": dtype, "threads": torch.get_num_threads(),
            "gemm": gemm_rates(device, dtype, GEMM_SHAPES[device][:2] if quick else None, run_time / 2),
            **bandwidth(device, 2**20 if quick else None, run_time),
            "op_overhead_s": op_overhead(device, 100 if quick else TINY_OPS, run_time)}
