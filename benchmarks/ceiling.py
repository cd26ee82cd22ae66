"""The GEMM as a case: the ceiling claim C2 holds equation (1) to. Not a grid's area (the runner calibrates the
peak itself, ``core.hardware.machine.gemm_peak``), but a case the pairs' workers build by name (``cases.CEILINGS``),
timed beside equation (1) in the same moments (``benchmarks.pairs``, kind c2)."""

import torch

from transformer.flops import Breakdown, Flops

from .area import Area, Prepared, Skip, on_device, synchronized
from .core.hardware import machine
from .grids import GRID_NAMES


def build(size: int, dtype: str, device: str) -> Prepared:
    """One (size x size) @ (size x size) matmul on random operands, as ``machine.gemm_peak`` times it but into an
    output of its own: 2 * size^3 matmul FLOPs. An output allocated by each call (16 MB at 2048) would set glibc's
    large-buffer threshold, and with it the memory state of the case timed beside it in one process."""
    dev = on_device(device)
    if dtype not in machine.GEMM_DTYPES[dev.type]:
        raise Skip(f"dtype {dtype} is calibrated on {dev.type} only if in {machine.GEMM_DTYPES[dev.type]}")
    a, b, c = (torch.randn(size, size, device=dev, dtype=getattr(torch, dtype)) for _ in range(3))
    f = Flops(Breakdown(matmul={"gemm": 2 * size**3}), Breakdown())
    return Prepared(synchronized(lambda: torch.mm(a, b, out=c), dev), f, tokens=size, device=dev.type, dtype=dtype)


CEILING = Area(
    name="gemm",
    axes={g: {"size": sorted({s for sizes in machine.GEMM_SIZES.values() for s in sizes}), "dtype": ["float32"],
              "device": ["cpu", "cuda"]} for g in GRID_NAMES},
    build=build,
    tokens=lambda params, method="forward": params["size"],
)


def ceiling(device: str) -> dict:
    """The GEMM case C2 holds a device's attention to: the largest calibration size, float32."""
    return {"size": machine.GEMM_SIZES[device][-1], "dtype": "float32", "device": device}
