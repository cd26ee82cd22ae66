"""Equation (1) alone: sequence length, head dim, backend, causal, dtype, device (claims C2, C6)."""

from .common import _CaseBenchmark, grid_params


class ScaledDotProductAttention(_CaseBenchmark):
    area = "attention"
    params, param_names = grid_params(area)
