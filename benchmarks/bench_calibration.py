"""The machine's GEMM peak per device and dtype: the ceiling every fraction-of-peak track divides by."""

import torch

from .area import Skip
from .core.hardware import machine


class GemmPeak:
    params = (["cpu", "cuda"], ["float32", "float16", "bfloat16"])
    param_names = ["device", "dtype"]
    timeout = 300

    def setup(self, device, dtype):
        if dtype not in machine.GEMM_DTYPES[device]:
            raise Skip(f"dtype {dtype} is calibrated on {device} only if in {machine.GEMM_DTYPES[device]}")
        if device == "cuda" and not torch.cuda.is_available():
            raise Skip("no CUDA device on this machine")
        size = machine.GEMM_SIZES[device][-1]
        dev = torch.device(device)
        self.a, self.b = (torch.randn(size, size, device=dev, dtype=getattr(torch, dtype)) for _ in range(2))
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def time_matmul(self, device, dtype):
        torch.mm(self.a, self.b)
        self.sync()

    def track_gemm_peak_flops_per_s(self, device, dtype):
        """Best matmul FLOP/s over machine.GEMM_SIZES[device]."""
        return machine.gemm_peak(device, dtype)

    track_gemm_peak_flops_per_s.unit = "FLOP/s"
