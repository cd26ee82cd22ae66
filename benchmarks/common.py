"""What every asv benchmark class shares: build the area's case in ``setup``.

An area's asv class (in its ``bench_<area>.py``) is ``class Name(_CaseBenchmark): AREA = AREA``: its asv
``params`` and ``param_names`` are the area's axes on the active grid. The base's name starts with an
underscore so that asv's discovery, which also sees imported names, does not collect it on its own. Nothing touches
CUDA at import time; every timed GPU call synchronizes (``area.Prepared``'s callables).

``setup_cache`` runs once per class and run: it measures this machine's GEMM peaks (the ceiling of
``track_fraction_of_peak``) and records the machine's metadata next to asv's results
(``machine.asv_metadata_path``), since asv's results JSON has no field for torch/CUDA/GPU facts.
"""

from __future__ import annotations

import torch

from . import grids
from .area import Area, Skip
from .core.hardware import machine
from .core.records import is_oom, write_json_atomic
from .core.timing import measure


class _CaseBenchmark:
    """Base of the asv classes: ``AREA`` defines the cases, ``area`` is its name; params come from the active
    grid. The first argument after ``self`` of every method is ``setup_cache``'s GEMM peaks."""

    AREA: Area | None = None
    area: str
    timeout = 300
    #: seconds of timing behind each achieved-FLOP/s track
    min_run_time = 0.2

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.AREA is not None:
            cls.area = cls.AREA.name
            cls.params, cls.param_names = grid_params(cls.AREA)

    def setup_cache(self):
        peaks = machine.calibrate(grids.grid_thread_counts(grids.active_grid()))
        path = machine.asv_metadata_path()
        if path:
            write_json_atomic(path, {"machine": machine.metadata(), "gemm_peaks": peaks})
        return peaks

    def setup(self, peaks, *params):
        torch.manual_seed(0)
        values = dict(zip(self.param_names, params, strict=True))
        if not self.AREA.on_grid(values, grids.active_grid()):  # asv runs the axes' product; the grid
            raise Skip(f"not a case of the {grids.active_grid()!r} grid")  # may leave some out
        try:
            self.case = self.AREA.build(**values)
            if self.case.threads is not None:
                torch.set_num_threads(self.case.threads)  # each asv benchmark runs in its own process
            self.case.forward()  # warm-up: allocator, kernel selection, lazy initialisation
        except Exception as error:
            if not is_oom(error):
                raise
            # one rule with the runner: out of memory on any device (torch.OutOfMemoryError on a GPU, the
            # CPU allocator's RuntimeError) is recorded as out of memory with its parameters, and the run goes
            # on. asv can only skip, so the reason goes into a sidecar that reports.tidy joins back.
            reason = str(error).splitlines()[0]
            machine.record_asv_oom(type(self).__name__, params, reason)
            raise Skip(f"out of memory: {reason}") from error

    def time_forward(self, peaks, *params):
        self.case.forward()

    def peakmem_forward(self, peaks, *params):
        self.case.forward()

    def track_matmul_flops(self, peaks, *params):
        """Analytic matmul FLOPs of one forward call (equal to torch's FlopCounterMode count)."""
        return self.case.flops.forward.matmul_total

    track_matmul_flops.unit = "FLOP"

    def track_achieved_flops_per_s(self, peaks, *params):
        """Matmul FLOPs of one forward call over its median time (torch.utils.benchmark)."""
        timing = measure.blocked_timing(self.case.forward, self.min_run_time)
        return self.case.flops.forward.matmul_total / timing.median

    track_achieved_flops_per_s.unit = "FLOP/s"

    def track_fraction_of_peak(self, peaks, *params):
        """Achieved FLOP/s over this machine's measured GEMM peak for the same device, dtype and threads; never
        above 1 by more than the tolerance (machine.bounded_fraction: a peak that read low is raised)."""
        key = machine.peak_key(self.case.device, self.case.dtype, self.case.threads)
        if key not in peaks:
            raise Skip(f"no GEMM peak measured for {key}")
        return machine.bounded_fraction(self.track_achieved_flops_per_s(peaks, *params), peaks[key])[0]

    track_fraction_of_peak.unit = "fraction"

    def track_gpu_peak_memory_bytes(self, peaks, *params):
        return measure.gpu_peak_memory(self.case.forward, self.case.device)

    track_gpu_peak_memory_bytes.unit = "bytes"

    def _telemetry(self):
        return measure.gpu_telemetry(self.case.forward, self.case.device)

    def track_gpu_power_w(self, peaks, *params):
        return self._telemetry().power_w

    track_gpu_power_w.unit = "W"

    def track_gpu_sm_clock_mhz(self, peaks, *params):
        return self._telemetry().sm_clock_mhz

    track_gpu_sm_clock_mhz.unit = "MHz"

    def track_gpu_utilization_pct(self, peaks, *params):
        return self._telemetry().utilization_pct

    track_gpu_utilization_pct.unit = "%"

    def track_energy_per_token_j(self, peaks, *params):
        t = self._telemetry()
        return t.energy_per_call_j() / self.case.tokens

    track_energy_per_token_j.unit = "J/token"


def grid_params(area: Area) -> tuple[list[list], list[str]]:
    """asv's (params, param_names) for one area on the active grid."""
    ax = area.axes[grids.active_grid()]
    return list(ax.values()), list(ax)
