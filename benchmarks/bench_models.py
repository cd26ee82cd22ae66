"""The Transformer against the RNNsearch baseline on the same tokens (claim C1)."""

from .common import _CaseBenchmark, grid_params


class EncoderDecoder(_CaseBenchmark):
    area = "models"
    params, param_names = grid_params(area)

    def time_train_step(self, peaks, *params):
        self.case.train_step()

    def time_generate(self, peaks, *params):
        self.case.generate()

    def track_generate_matmul_flops(self, peaks, *params):
        return self.case.generate_flops.forward.matmul_total

    track_generate_matmul_flops.unit = "FLOP"
