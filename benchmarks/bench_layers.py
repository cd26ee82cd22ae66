"""Table 1: a self-attention layer against a recurrent layer over sequence length and width (n < d rule)."""

from .common import _CaseBenchmark, grid_params


class SelfAttentionVsRecurrentLayer(_CaseBenchmark):
    area = "layers"
    params, param_names = grid_params(area)
