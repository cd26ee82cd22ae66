"""The toy area: one matrix product (what a newcomer's first area looks like; tests/test_areas.py adds it)."""

import torch
from torch.profiler import record_function

from transformer import flops

from .area import Area, Prepared, on_device, synchronized
from .common import _CaseBenchmark


def build(n: int, device: str) -> Prepared:
    """An n x n matrix product; its FLOP entry is named as the label around it."""
    dev = on_device(device)
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)

    def call():
        with record_function("toy.product"):
            return a @ b

    work = flops.Flops(flops.Breakdown(matmul={"toy.product": 2 * n**3}), flops.Breakdown())
    return Prepared(synchronized(torch.no_grad()(call), dev), work, tokens=n, device=dev.type)


AREA = Area(name="toy", axes={g: {"n": [64, 128], "device": ["cpu"]} for g in ("quick", "default", "full")},
            build=build, tokens=lambda params, method="forward": params["n"],
            components={"toy.product": "toy product"})


class ToyProduct(_CaseBenchmark):
    AREA = AREA
