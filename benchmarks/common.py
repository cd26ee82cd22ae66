"""What every asv benchmark class shares: build the case in ``setup`` from ``benchmarks.cases``.

Classes here start with an underscore so that asv's discovery, which also sees imported names,
does not collect them on their own. Nothing touches CUDA at import time; every timed GPU call
synchronizes (see cases._synchronized).
"""

from __future__ import annotations

import torch

from . import cases


class _CaseBenchmark:
    """Base of the asv classes: ``area`` names the cases; params come from the active grid."""

    area: str
    timeout = 300

    def setup(self, *params):
        torch.manual_seed(0)
        self.case = cases.build(self.area, dict(zip(self.param_names, params)))
        self.case.forward()  # warm-up: allocator, kernel selection, lazy initialisation

    def time_forward(self, *params):
        self.case.forward()

    def peakmem_forward(self, *params):
        self.case.forward()

    def track_matmul_flops(self, *params):
        """Analytic matmul FLOPs of one forward call (equal to torch's FlopCounterMode count)."""
        return self.case.flops.forward.matmul_total

    track_matmul_flops.unit = "FLOP"


def grid_params(area: str) -> tuple[list[list], list[str]]:
    """asv's (params, param_names) for one area of the active grid."""
    ax = cases.axes(area)
    return list(ax.values()), list(ax)
