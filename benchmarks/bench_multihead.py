"""Multi-head attention at fixed d_model: heads 1..64, strategy, with and without W_O (claims C3, C4)."""

from .common import _CaseBenchmark, grid_params


class MultiHeadAttention(_CaseBenchmark):
    area = "multihead"
    params, param_names = grid_params(area)

    def time_train_step(self, peaks, *params):
        self.case.train_step()
