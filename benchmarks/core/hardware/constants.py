"""A machine's constants, measured by micro-benchmarks and never fitted to the suite's cases: the rate of a
matrix product and of the fused attention kernel over a grid of shapes (square, thin, batched, the shapes
attention runs), the memory bandwidth of a STREAM-style copy and triad on arrays far beyond the last-level
cache (and a copy's rate by size, with what a freshly allocated tensor costs to write), the rate of the
operators whose arithmetic can outweigh their memory traffic (tanh, sigmoid, exp, GELU, softmax, layer norm),
and the host-side constants (``host_side``: the time of a small module-style workload, what a line of model code and
a backward node cost, and what one dispatch costs beyond its work), each the least of its timings at moments spread
over the measurement. A performance model (``perfmodel``) predicts a case from these alone.

    measure(device)   every constant of one device, at the current thread count (a dict, JSON-ready)
"""

from __future__ import annotations

import functools
import glob
import itertools
import math
import statistics

import torch
import torch.nn.functional as F
import torch.utils.benchmark as tb
from torch.utils.benchmark.utils import common as tb_common

from . import control, host_side

#: each kernel's grid per device, axes (batch, m, n, k) for a matrix product C (m x n) = A (m x k) B (k x n)
#: done ``batch`` times (``gemm_cold``: thin products, whose B, the weight, is read from beyond the last-level
#: cache; a wider product reads each byte of B for so many rows that where B comes from does not show), and
#: (batch x heads, query length, key length, head dim) for fused attention; the rate between grid points is
#: interpolated in log space (``perfmodel.Grid``)
GRIDS = {
    "cpu": {
        "gemm": {"batch": (1, 16, 256), "m": (1, 16, 128, 1024), "n": (1, 16, 128, 1024),
                 "k": (1, 16, 128, 1024)},
        "gemm_cold": {"batch": (1,), "m": (1, 16, 128), "n": (16, 128, 1024, 8192, 32768), "k": (16, 128, 1024)},
        "attention": {"batch": (8, 64, 512), "L": (1, 16, 128, 1024), "S": (1, 16, 128, 1024),
                      "E": (8, 16, 32, 64, 512)},
        "attention_backward": {"batch": (8, 64, 512), "L": (16, 128, 1024), "S": (16, 128, 1024),
                               "E": (8, 16, 32, 64, 512)},
    },
    "cuda": {
        "gemm": {"batch": (1, 16, 256), "m": (1, 64, 512, 8192), "n": (1, 64, 512, 8192),
                 "k": (1, 64, 512, 8192)},
        "gemm_cold": {"batch": (1,), "m": (1, 64, 512), "n": (64, 512, 8192, 32768), "k": (64, 512, 8192)},
        "attention": {"batch": (8, 64, 512), "L": (1, 128, 1024, 16384), "S": (1, 128, 1024, 16384),
                      "E": (16, 64, 256)},
        "attention_backward": {"batch": (8, 64, 512), "L": (128, 1024, 16384), "S": (128, 1024, 16384),
                               "E": (16, 64, 256)},
    },
}
#: a grid point above this many FLOPs is timed at a smaller shape (its batch, then its largest axis, halved
#: until under it): beyond it the rate no longer grows, and timing it would cost seconds
FLOP_CAP = {"cpu": 2**29, "cuda": 2**36}
#: and above this many elements in its operands and result (a thin product of huge operands is memory-bound:
#: its rate per byte is the same at a quarter of the size)
ELEMENT_CAP = {"cpu": 2**26, "cuda": 2**28}
#: elements of each STREAM array (float32): 256 MiB on the CPU, far beyond any last-level cache; 1 GiB on a GPU
STREAM_ELEMENTS = {"cpu": 64 * 2**20, "cuda": 256 * 2**20}
#: tensor sizes (bytes) at which a copy and a freshly allocated write are timed: from inside the caches to far
#: beyond them, and across the allocator's switch to new pages per allocation (glibc: from 32 MiB)
MEMORY_SIZES = {"cpu": (2**20, 2**22, 2**24, 2**26, 2**28), "cuda": (2**22, 2**24, 2**26, 2**28, 2**30)}
#: operators whose arithmetic, not their memory traffic, can bound them (transcendentals, and the row-wise
#: normalisations): each timed on a contiguous (rows, POINTWISE_ROW) tensor; ``perfmodel.POINTWISE_OF`` names
#: the aten operators each prices
POINTWISE = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "exp": torch.exp, "gelu": F.gelu,
             "softmax": lambda x: torch.softmax(x, -1), "log_softmax": lambda x: torch.log_softmax(x, -1),
             "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:])}
POINTWISE_ROW = 256
#: bytes each of them writes when timed: from inside the caches to beyond them
POINTWISE_SIZES = {"cpu": (2**16, 2**20, 2**24), "cuda": (2**20, 2**24, 2**28)}
#: the quick grid times its points at most 1/QUICK_SHRINK of the caps' FLOPs and elements (seconds, not rates)
QUICK_SHRINK = 64
#: calls that warm a kernel before its samples are sized and timed (``_samples``)
WARM_CALLS = 2
#: samples of a fresh tensor's write, the fastest kept (``_best_seconds``)
FRESH_SAMPLES = 5



@functools.cache
def cache_bytes(device: str = "cpu") -> int | None:
    """The last-level cache of ``device`` in bytes: the largest CPU cache the kernel lists (Linux sysfs), a
    GPU's L2; None where it cannot be read."""
    if device == "cuda":
        return getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None) or None
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        with open(path) as f:
            text = f.read().strip()
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        if text and (text[-1] in units or text.isdigit()):
            sizes.append(int(text.rstrip("KMG")) * units.get(text[-1], 1))
    return max(sizes, default=None)


def _samples(stmt, sample_time: float, samples: int) -> list[float]:
    """Seconds per call of ``stmt`` in each of ``samples`` timings of about ``sample_time`` (at least one call
    each), after WARM_CALLS calls that warm it and one that sizes them: for hundreds of grid points, where
    blocked_autorange's sizing would cost more than the timing. The blocks are torch's Timer's own
    (``Timer._timeit``: its statement, its thread count, a GPU synchronised), without the two warm-up calls
    ``Timer.timeit`` makes before each: for a point of one call a block, they were two thirds of its calls."""
    timer = tb.Timer(stmt="stmt()", globals={"stmt": stmt}, num_threads=torch.get_num_threads())
    with tb_common.set_torch_threads(torch.get_num_threads()):
        timer._timeit(WARM_CALLS)
        once = timer._timeit(1)
        number = max(1, int(sample_time / max(once, 1e-7)))
        return sorted(timer._timeit(number) / number for _ in range(samples))


def _best_seconds(stmt, sample_time: float, samples: int) -> float:
    """The fastest of ``samples`` timings: for a cost that noise only adds to, such as the page faults of a
    fresh tensor, which at 256 MiB is one call per sample."""
    return _samples(stmt, sample_time, samples)[0]


def _kernel_seconds(stmt, block_time: float) -> float:
    """Seconds per call of a kernel: the median of three blocks of about ``block_time``."""
    return _samples(stmt, block_time, 3)[1]


def _capped(dims: tuple[int, ...], flops, elements, device: str, shrink: int = 1) -> tuple[int, ...]:
    """``dims`` (batch first) with the batch, then the largest axis, halved until the kernel's FLOPs and
    elements are within FLOP_CAP and ELEMENT_CAP, each divided by ``shrink``."""
    dims = list(dims)
    while (flops(*dims) > FLOP_CAP[device] // shrink or elements(*dims) > ELEMENT_CAP[device] // shrink) \
            and max(dims) > 1:
        i = 0 if dims[0] > 1 else dims.index(max(dims))
        dims[i] //= 2
    return tuple(dims)


def gemm_flops(batch: int, m: int, n: int, k: int) -> int:
    return 2 * batch * m * n * k


def gemm_elements(batch: int, m: int, n: int, k: int) -> int:
    return batch * (m * k + k * n + m * n)


def attention_elements(batch: int, L: int, S: int, E: int) -> int:
    """Q, K, V and the output (the fused kernel never writes the L x S scores)."""
    return batch * E * (2 * L + 2 * S)


def attention_flops(batch: int, L: int, S: int, E: int) -> int:
    """Q K^T and the weights times V (head dim E for both), as torch's flop counter has them."""
    return 4 * batch * L * S * E


def attention_backward_flops(batch: int, L: int, S: int, E: int) -> int:
    """The scores recomputed and four products of the gradients."""
    return 10 * batch * L * S * E


class _Normal:
    """Standard-normal operands for one kernel's grid points on ``device`` in ``dtype``, cut from one buffer of
    ``size`` elements (what one point's operands and result hold at most: ELEMENT_CAP, over the quick grid's
    shrink) drawn at the first request, instead of drawn afresh for each point (torch.randn was a third of the
    kernels' time): each request gets the next region, aligned to 64 bytes as the allocator's are, so that the
    operands of one call never share memory."""

    def __init__(self, device: str, dtype: torch.dtype, size: int):
        self.device, self.dtype, self.size = device, dtype, size
        self.buffer: torch.Tensor | None = None
        self.next = 0

    def __call__(self, *shape: int, requires_grad: bool = False) -> torch.Tensor:
        if self.buffer is None:
            self.buffer = torch.randn(self.size, device=self.device, dtype=self.dtype)
        numel, align = math.prod(shape), max(1, 64 // self.dtype.itemsize)
        if numel > self.size:
            return torch.randn(*shape, device=self.device, dtype=self.dtype, requires_grad=requires_grad)
        start = self.next if self.next + numel <= self.size else 0
        self.next = -(-(start + numel) // align) * align
        return self.buffer[start:start + numel].view(shape).detach().requires_grad_(requires_grad)


def _gemm_call(normal: _Normal, batch, m, n, k):
    a = normal(batch, m, k)
    b = normal(batch, k, n)
    if batch == 1:
        a, b = a[0], b[0]
    return lambda: torch.matmul(a, b)


#: at most this many copies of a cold product's B (each call reads the next: the one read last is the
#: farthest from the cache)
COLD_COPIES = 64


def _gemm_cold_call(normal: _Normal, batch, m, n, k):
    """A matrix product whose B is not in the cache: it cycles through copies of B that, together, are twice
    the last-level cache (at most COLD_COPIES of them, each its own allocation: more than ``normal`` holds, and
    copied from it: drawing twice the cache of normal numbers for each grid point took nine tenths of the time)."""
    a = normal(m, k)
    per = k * n * normal.dtype.itemsize
    copies = max(2, min(COLD_COPIES, -(-2 * (cache_bytes(normal.device) or 0) // per)))
    bs = itertools.cycle([normal(k, n).clone() for _ in range(copies)])
    return lambda: torch.matmul(a, next(bs))


def _attention_call(normal: _Normal, batch, L, S, E, backward=False):
    q = normal(batch, 1, L, E, requires_grad=backward)
    k, v = (normal(batch, 1, S, E, requires_grad=backward) for _ in range(2))
    if not backward:
        return lambda: F.scaled_dot_product_attention(q, k, v)
    out = F.scaled_dot_product_attention(q, k, v)
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)


#: each kernel's FLOPs, elements and call, by name
KERNELS = {"gemm": (gemm_flops, gemm_elements, _gemm_call),
           "gemm_cold": (gemm_flops, gemm_elements, _gemm_cold_call),
           "attention": (attention_flops, attention_elements, _attention_call),
           "attention_backward": (attention_backward_flops, attention_elements,
                                  lambda *a: _attention_call(*a, backward=True))}


def kernel_rates(kind: str, device: str = "cpu", dtype: str = "float32", grid: dict | None = None,
                 block_time: float = 0.003, shrink: int = 1) -> dict:
    """FLOP/s of ``kind`` (a KERNELS name) at every point of ``grid`` (default GRIDS[device][kind]; ``shrink``:
    the caps on a point's size divided by it):
    ``{"axes": [[name, values], ...], "flops_per_s": [...]}``, the rates in the order of itertools.product over
    the axes in that order (a list of pairs: records are written with sorted keys, which would reorder a dict)."""
    flops, elements, call = KERNELS[kind]
    grid = grid or GRIDS[device][kind]
    normal, rates, timed = _Normal(device, getattr(torch, dtype), ELEMENT_CAP[device] // shrink), [], {}
    for point in itertools.product(*grid.values()):
        dims = _capped(point, flops, elements, device, shrink)
        if dims not in timed:
            timed[dims] = flops(*dims) / _kernel_seconds(call(normal, *dims), block_time)
        rates.append(timed[dims])
    return {"axes": [[name, list(values)] for name, values in grid.items()], "flops_per_s": rates}


def bandwidth(device: str = "cpu", elements: int | None = None, min_run_time: float = 0.2) -> dict[str, float]:
    """Bytes per second (read plus written) of a STREAM copy (b = a: 8 bytes an element) and triad
    (a = b + s c: 12 bytes an element), float32."""
    n = elements or STREAM_ELEMENTS[device]
    a, b, c = (torch.rand(n, device=device) for _ in range(3))
    copy = host_side.seconds(lambda: b.copy_(a), min_run_time)
    triad = host_side.seconds(lambda: torch.add(b, c, alpha=3.0, out=a), min_run_time)
    return {"copy_bytes_per_s": 8 * n / copy, "triad_bytes_per_s": 12 * n / triad}


def memory_rates(device: str = "cpu", sizes=None, min_run_time: float = 0.3) -> dict[str, list]:
    """At each size (bytes) of MEMORY_SIZES: the rate of a copy between two tensors already in use (bytes
    read plus written per second: the bandwidth an operator of that footprint sees, caches included) and the
    rate at which a new tensor of that size is allocated and written (bytes per second: where the allocator
    hands out fresh pages, each first write is a page fault)."""
    sizes = list(sizes or MEMORY_SIZES[device])
    copy, fresh = [], []
    for size in sizes:
        n = size // 4
        a, b = torch.ones(n, device=device), torch.empty(n, device=device)
        copy.append(2 * size / host_side.seconds(lambda a=a, b=b: b.copy_(a), min_run_time))
        fresh.append(size / _best_seconds(lambda n=n: torch.ones(n, device=device), min_run_time / FRESH_SAMPLES,
                                          FRESH_SAMPLES))
        del a, b
    return {"bytes": sizes, "copy_bytes_per_s": copy, "fresh_bytes_per_s": fresh}


def pointwise_rates(device: str = "cpu", dtype: str = "float32", sizes=None, min_run_time: float = 0.05) -> dict:
    """Bytes written per second by each POINTWISE operator at each size (bytes written) of POINTWISE_SIZES:
    ``{"bytes": sizes, "written_bytes_per_s": {name: [rate at each size]}}``."""
    sizes = list(sizes or POINTWISE_SIZES[device])
    dt, rates = getattr(torch, dtype), {}
    for name, fn in POINTWISE.items():
        rates[name] = []
        for size in sizes:
            x = torch.randn(max(1, size // dt.itemsize // POINTWISE_ROW), POINTWISE_ROW, device=device, dtype=dt)
            rates[name].append(x.numel() * dt.itemsize / host_side.seconds(lambda x=x, fn=fn: fn(x), min_run_time))
    return {"bytes": sizes, "written_bytes_per_s": rates}


#: a measurement whose GEMM kernel's best rate falls below this share of the control GEMM's median rate through it
#: ran its kernels slowed (``disturbed``): on this VM, 2 threads' products ran at one thread's rate for seconds while
#: the controls around them read 148-165 GFLOP/s, and every prediction priced with them read a fifth off
KERNEL_SHORT = 0.8


def kernels_share(c: dict) -> float | None:
    """Constants ``c``'s GEMM kernel's best rate over the control GEMM's median rate through their measurement;
    None where they hold no such rates (a GPU's, or no control)."""
    rates, control_rate = c.get("kernels", {}).get("gemm", {}).get("flops_per_s"), c.get("control_flops_per_s")
    return max(rates) / control_rate if rates and control_rate else None


def disturbed(c: dict) -> str | None:
    """Why constants ``c`` (``measure``'s, on the CPU, not quick) cannot stand for the machine, or None: their GEMM
    kernel's best rate below KERNEL_SHORT of the control GEMM's median rate through the measurement (a 256² product,
    which the best of the grid's larger ones at least matches on a quiet host; ``kernels_share``)."""
    share = kernels_share(c)
    if c.get("quick") or share is None or share >= KERNEL_SHORT:
        return None
    best, control_rate = max(c["kernels"]["gemm"]["flops_per_s"]), c["control_flops_per_s"]
    return (f"their GEMM kernel's best rate, {best / 1e9:.0f} GFLOP/s, is below {KERNEL_SHORT:.0%} of the control "
            f"GEMM's {control_rate / 1e9:.0f} GFLOP/s through the measurement: the kernels ran slowed")


def measure(device: str = "cpu", dtype: str = "float32", quick: bool = False) -> dict:
    """Every constant of ``device`` at the current thread count: the kernels' rates by shape, the bandwidth
    and the dispatch overheads (seconds; the host-side ones the least of ``host_side.MOMENTS`` timings spread over the
    measurement). ``quick``: two points per axis, small arrays, short timings (tests).
    On the CPU, the control's rate before each part and after the last (``controls``) and their median
    (``control_flops_per_s``): the machine's speed while they were timed, which a case's own control is set
    against when the constants price it."""
    run_time = 0.02 if quick else 0.2
    grids = GRIDS[device]
    if quick:
        grids = {kind: {a: tuple(dict.fromkeys((v[0], v[-1]))) for a, v in grid.items()}
                 for kind, grid in grids.items()}
    controls = []

    def controlled(part):
        if device == "cpu":
            controls.append(control.control_flops_per_s())
        return part()

    timed: list[dict] = []

    def host_moment():  # one of the host-side constants' moments (``host_side.MOMENTS``)
        ops, counted = 100 if quick else host_side.TINY_OPS, timed[0]["host"] if timed else None
        timed.append({"overhead_s": controlled(lambda: host_side.overheads(device, ops, run_time)),
                      "host": controlled(lambda: host_side.host(device, run_time, cache_bytes(device), counted))})

    host_moment()
    out = {"device": device, "dtype": dtype, "threads": torch.get_num_threads(), "quick": quick,
           "cache_bytes": cache_bytes(device),
           "kernels": {kind: controlled(lambda kind=kind, grid=grid: kernel_rates(
               kind, device, dtype, grid, 0.0005 if quick else 0.003, QUICK_SHRINK if quick else 1))
               for kind, grid in grids.items()}}
    for _ in range(host_side.MOMENTS - 2):
        host_moment()
    out.update(**controlled(lambda: bandwidth(device, 2**20 if quick else None, run_time)),
               memory=controlled(lambda: memory_rates(device, MEMORY_SIZES[device][::3] if quick else None,
                                                      0.02 if quick else 0.3)),
               pointwise=controlled(lambda: pointwise_rates(device, dtype, POINTWISE_SIZES[device][:2] if quick
                                                            else None, 0.01 if quick else 0.05)))
    host_moment()
    out.update(host_side.least(timed))
    if controls:
        controls.append(control.control_flops_per_s())
        out.update(controls=controls, control_flops_per_s=statistics.median(controls))
    return out
