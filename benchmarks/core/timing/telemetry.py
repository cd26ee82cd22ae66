"""GPU telemetry while a case runs, from NVML (nvidia-ml-py): power, clocks, utilisation, energy.

``sample(fn, device_index, min_time)`` calls ``fn`` repeatedly for at least ``min_time`` seconds
while a background thread polls NVML, and returns the averages, the energy the GPU drew (from its
energy counter where the GPU has one, else power integrated over time) and the number of calls.
``available()`` says whether NVML answers on this machine; NVML is not initialised at import time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pynvml  # nvidia-ml-py: loads NVML only when nvmlInit is called


@dataclass
class Telemetry:
    """What NVML reported while ``calls`` calls ran for ``seconds``."""

    calls: int
    seconds: float
    power_w: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    utilization_pct: float
    energy_j: float
    samples: int = field(default=0)

    def energy_per_call_j(self) -> float:
        return self.energy_j / self.calls


def _nvml():
    pynvml.nvmlInit()
    return pynvml


def available() -> bool:
    try:
        nvml = _nvml()
    except Exception:
        return False
    try:
        return nvml.nvmlDeviceGetCount() > 0
    finally:
        nvml.nvmlShutdown()


def _energy_mj(nvml, handle) -> float | None:
    try:
        return float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
    except Exception:  # pre-Volta GPUs have no energy counter
        return None


def sample(fn: Callable[[], object], device_index: int = 0, min_time: float = 1.0,
           interval: float = 0.01) -> Telemetry:
    """Run ``fn`` (which must synchronize its device) for at least ``min_time`` s under NVML polling."""
    nvml = _nvml()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(device_index)
        readings: list[tuple[float, float, float, float, float]] = []
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                readings.append((
                    time.perf_counter(),
                    nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                    nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
                    nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
                    nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                ))
                stop.wait(interval)

        poller = threading.Thread(target=poll, daemon=True)
        energy_start = _energy_mj(nvml, handle)
        start = time.perf_counter()
        poller.start()
        calls = 0
        while calls == 0 or time.perf_counter() - start < min_time:
            fn()
            calls += 1
        elapsed = time.perf_counter() - start
        energy_end = _energy_mj(nvml, handle)
        stop.set()
        poller.join()
    finally:
        nvml.nvmlShutdown()
    return summarize(readings, calls, elapsed, energy_start, energy_end)


def summarize(readings, calls: int, elapsed: float, energy_start_mj: float | None,
              energy_end_mj: float | None) -> Telemetry:
    """Averages of the polled readings; energy from the counter, else mean power x elapsed time."""
    if not readings:
        raise RuntimeError("NVML returned no readings while the case ran")
    n = len(readings)
    power, sm, mem, util = (sum(r[i] for r in readings) / n for i in range(1, 5))
    if energy_start_mj is not None and energy_end_mj is not None:
        energy = (energy_end_mj - energy_start_mj) / 1000.0
    else:
        energy = power * elapsed
    return Telemetry(calls=calls, seconds=elapsed, power_w=power, sm_clock_mhz=sm, mem_clock_mhz=mem,
                     utilization_pct=util, energy_j=energy, samples=n)
