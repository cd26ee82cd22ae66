"""Sequential depth and launches of the graph each model executes (claim C1), tracked per commit."""

import torch

from . import cases
from .common import grid_params
from .core import opgraph


class SequentialDepth:
    """Operators on the critical path, and operators launched, per model, mode and sequence length."""

    area = "depth"
    params, param_names = grid_params(area)
    timeout = 300

    def setup(self, *params):
        torch.manual_seed(0)
        case = cases.build(self.area, dict(zip(self.param_names, params, strict=True)))
        self.graph = opgraph.record(case.forward)

    def track_sequential_depth(self, *params):
        return self.graph.depth

    track_sequential_depth.unit = "operators"

    def track_op_launches(self, *params):
        return self.graph.launches

    track_op_launches.unit = "operators"
