"""The machine a result was measured on, and its measured GEMM peak (the roofline's ceiling).

``metadata()`` gathers what is needed to compare results across machines: CPU model, cores, threads,
torch / CUDA / cuDNN / MKL / oneDNN versions, GPU name, driver and memory where there is one, and whether the
(virtual) machine hands its free memory back to its host (``free_page_reporting``).
``gemm_peak()`` measures the best matmul FLOP/s this machine reaches per device and dtype; achieved
FLOP/s of every case are reported as a fraction of it. Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Iterable

import pynvml  # nvidia-ml-py: loads NVML only when nvmlInit is called
import torch

from ...area import using_threads
from .. import records
from ..records import write_json_atomic
from .control import gemm_timer, threads_left_alone

#: Square GEMM sizes tried per device: the peak is the best of them (larger ones saturate the units).
GEMM_SIZES = {"cpu": (1024, 2048), "cuda": (4096, 8192)}
#: seconds of timing per size and repeat of a calibration (gemm_peak)
PEAK_TIME = 0.3
GEMM_DTYPES = {"cpu": ("float32",), "cuda": ("float32", "float16", "bfloat16")}
#: where Linux lists its virtio devices: a memory balloon (device id 5) that offers free page reporting (feature 5)
VIRTIO_DEVICES = "/sys/bus/virtio/devices"
BALLOON, REPORTING = "0x0005", 5


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _library_version(pattern: str) -> str | None:
    match = re.search(pattern, torch.__config__.show())
    return match.group(1) if match else None


def free_page_reporting(devices: str = VIRTIO_DEVICES) -> bool | None:
    """Whether this virtual machine reports its free memory to its host (a virtio balloon with free page
    reporting), which takes those pages back: a process that faults one in then waits for the host too, so a page
    fault costs more after other processes have freed much memory, a moment that pairing does not cancel where
    one side faults many pages a call. None where Linux lists no virtio devices (not a virtio guest)."""
    if not os.path.isdir(devices):
        return None
    for device in sorted(os.listdir(devices)):
        try:
            with open(os.path.join(devices, device, "device")) as f:
                kind = f.read().strip()
            with open(os.path.join(devices, device, "features")) as f:
                features = f.read().strip()
        except OSError:
            continue
        if kind == BALLOON and features[REPORTING:REPORTING + 1] == "1":
            return True
    return False


def _gpu() -> dict:
    if not torch.cuda.is_available():
        return {"gpu_name": None, "gpu_count": 0, "gpu_memory_bytes": None, "gpu_driver": None}
    props = torch.cuda.get_device_properties(0)
    info = {"gpu_name": props.name, "gpu_count": torch.cuda.device_count(),
            "gpu_memory_bytes": props.total_memory, "gpu_driver": None,
            "gpu_compute_capability": f"{props.major}.{props.minor}"}
    try:
        pynvml.nvmlInit()
        try:
            info["gpu_driver"] = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML on this machine: the driver stays unknown, the rest is still known
        pass
    return info


def metadata() -> dict:
    """Facts about this machine and its software, as a flat JSON-able dict."""
    return {
        "regime": records.regime(),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "mkl": (_library_version(r"Math Kernel Library Version ([\w.\-]+)")
                if torch.backends.mkl.is_available() else None),
        "onednn": _library_version(r"MKL-DNN v([\w.]+)") if torch.backends.mkldnn.is_available() else None,
        "free_page_reporting": free_page_reporting(),
        **_gpu(),
    }


def gemm_flops_per_s(size: int, device: str = "cpu", dtype: str = "float32", min_run_time: float = 0.3) -> float:
    """Median FLOP/s of one (size x size) @ (size x size) matmul: 2 * size^3 FLOPs per call."""
    timer = gemm_timer(size, device, dtype)
    with threads_left_alone():
        return 2 * size**3 / timer.blocked_autorange(min_run_time=min_run_time).median


def local_devices() -> list[str]:
    """The devices this machine has: the CPU, and CUDA where torch sees a GPU."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@functools.cache
def gemm_peak(device: str = "cpu", dtype: str = "float32", threads: int | None = None, repeats: int = 2) -> float:
    """The best matmul FLOP/s over GEMM_SIZES[device], each measured ``repeats`` times, at the current (or
    given) thread count; cached per process. A peak is a best case: the maximum resists a moment of
    contention on a shared machine better than a median would."""
    with using_threads(threads):
        return max(gemm_flops_per_s(s, device, dtype, PEAK_TIME) for s in GEMM_SIZES[torch.device(device).type]
                   for _ in range(repeats))


def cpu_counters(pids: Iterable[int] = ()) -> tuple[int, int, float] | None:
    """(clock ticks the cores were busy, clock ticks in all, the CPU seconds of this process and of the processes
    ``pids``, all their threads) so far, from Linux's /proc/stat, os.times and /proc/<pid>/stat (a process that
    has ended counts nothing from then on); None where /proc/stat is not there."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        own = os.times()
        mine = own.user + own.system + sum(process_cpu_s(pid) for pid in pids)
        return sum(fields) - fields[3] - fields[4], sum(fields), mine  # less idle and iowait
    except (OSError, ValueError, IndexError):
        return None


def process_cpu_s(pid: int) -> float:
    """The CPU seconds process ``pid`` has used so far, all its threads (user and system, Linux's /proc/<pid>/stat);
    0 for a process that is not there (ended and reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime, fields 14 and 15


def others_cpu_share(before: tuple | None, after: tuple | None) -> float | None:
    """The share of all cores that other processes used between two ``cpu_counters`` readings: the cores'
    busy time less the CPU time of this process and the processes the readings named (the kernel counts both in
    clock ticks, so a reading over a fraction of a second is good to a few per cent). None without both readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    own = (after[2] - before[2]) * os.sysconf("SC_CLK_TCK")
    return min(1.0, max(0.0, (after[0] - before[0] - own) / (after[1] - before[1])))


def peak_key(device: str, dtype: str, threads: int | None) -> str:
    """``device/dtype/threads``: a CPU peak under the thread count it ran at (the default resolved to its
    number, so that the default and the same count given explicitly are one peak); ``default`` on a GPU."""
    if device == "cpu" and threads is None:
        threads = torch.get_num_threads()
    return f"{device}/{dtype}/{'default' if threads is None else threads}"


#: how far a case's achieved FLOP/s may pass its calibrated peak before the peak is known to be too low (a
#: calibration slowed by other processes) and is raised to it: beyond this a fraction of peak is an error
PEAK_TOLERANCE = 1.05
#: how far past the best GEMM rate the machine ever showed for a device and dtype (any calibration, any thread
#: count) a case's FLOP/s may go before the record is impossible (a damaged or hand-made record, a time cut
#: short): such a record is not counted and raises no peak. A calibration slowed by other processes reads
#: low by up to about 2x on a busy 2-core machine; 3x leaves that room.
IMPOSSIBLE_OVER_PEAK = 3.0


def calibrate(threads: list[int] | tuple[int, ...] = (), fresh: bool = False) -> dict[str, float]:
    """GEMM peaks for every dtype of every device this machine has; the CPU at its default thread count
    and at each of ``threads``, one peak per real thread count. Keys from ``peak_key``. ``fresh``: measure
    again rather than reuse this process's earlier calibration (``gemm_peak`` caches)."""
    if fresh:
        gemm_peak.cache_clear()
    counts = sorted({torch.get_num_threads(), *threads})
    default = torch.get_num_threads()  # measured without setting it (area.using_threads says why)
    peaks = {peak_key("cpu", d, t): gemm_peak("cpu", d, None if t == default else t) for d in GEMM_DTYPES["cpu"]
             for t in counts}
    if torch.cuda.is_available():
        peaks.update({peak_key("cuda", d, None): gemm_peak("cuda", d) for d in GEMM_DTYPES["cuda"]})
    return peaks


def best_peaks(*calibrations: dict[str, float]) -> dict[str, float]:
    """Each key's best peak over several calibrations: a peak is a best case, and a calibration slowed by
    other processes only ever reads low."""
    return {key: max(c[key] for c in calibrations if key in c) for c in calibrations for key in c}


def bounded_fraction(achieved: float, peak: float) -> tuple[float, bool]:
    """(achieved over peak, whether the peak was too low): beyond PEAK_TOLERANCE the peak is raised to the
    achieved FLOP/s (a fraction of 1), never published above it."""
    if achieved > PEAK_TOLERANCE * peak:
        return 1.0, True
    return achieved / peak, False


def record_asv_oom(benchmark_class: str, params: tuple, reason: str) -> str | None:
    """Inside asv: record that ``benchmark_class`` ran out of memory at ``params`` (asv records only a
    skip), as ``.asv/oom/<env>/<class>--<params>.json`` next to the metadata; None outside asv."""
    where = asv_location()
    if where is None:
        return None
    key = "--".join([benchmark_class, *(re.sub(r"[^\w.=-]", "_", repr(p)) for p in params)])
    path = os.path.join(where[0], "oom", where[1], key + ".json")
    write_json_atomic(path, {"class": benchmark_class, "params": [repr(p) for p in params], "reason": reason,
                             "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    return path


def asv_metadata_path() -> str | None:
    """Where an asv run records this machine's metadata: ``.asv/metadata/<env>-<host>.json`` next to
    asv's own results (asv's results JSON has no field for torch/CUDA/GPU facts). The facts belong to
    the machine and the environment, not to a commit; the latest run's file wins.

    asv's own virtualenvs set ``ASV_CONF_DIR`` and ``ASV_ENV_NAME``; ``asv run -E existing`` sets
    neither (asv 0.6.6 runs an existing environment's benchmarks with the caller's environment
    variables only). Then this process is asv's runner script (``asv/benchmark.py <mode>
    <benchmark_dir> ...``), the configuration is the ``asv.conf.json`` above the benchmark folder, and
    the environment's name is the one asv gives an existing Python: ``existing-py`` and its path with
    the separators replaced by ``_``. None outside asv (pytest calling ``setup_cache`` writes nothing)."""
    where = asv_location()
    return None if where is None else os.path.join(where[0], "metadata", f"{where[1]}-{socket.gethostname()}.json")


def asv_location() -> tuple[str, str] | None:
    """Inside an asv benchmark process: (the folder that holds asv's results folder, the environment's
    name), see ``asv_metadata_path``; None outside asv."""
    conf = os.environ.get("ASV_CONF_DIR")
    env = os.environ.get("ASV_ENV_NAME")
    if not conf:
        argv = sys.argv
        if not (len(argv) >= 3 and os.path.basename(argv[0]) == "benchmark.py"
                and os.path.basename(os.path.dirname(argv[0])) == "asv"):
            return None
        conf = os.path.dirname(os.path.abspath(argv[2]))
        if not os.path.exists(os.path.join(conf, "asv.conf.json")):
            return None
        env = env or "existing-py" + sys.executable.replace(os.path.sep, "_")
    from asv.util import load_json  # asv.conf.json may hold comments; only asv calls this

    path = os.path.join(conf, "asv.conf.json")
    # this suite's asv.conf.json puts the results in .asv/results
    results = (load_json(path, js_comments=True).get("results_dir", "results") if os.path.exists(path)
               else ".asv/results")
    return os.path.dirname(os.path.join(conf, results).rstrip(os.path.sep)), env or "env"


#: other processes using more than this share of the cores (while this one waits) make a busy machine
BUSY_SHARE = 0.5
#: seconds the busy check watches the cores for, before every run
BUSY_SAMPLE_S = 0.5


def cpu_busy(seconds: float = 0.5) -> float | None:
    """Share of all cores that other processes use over the next ``seconds`` (while this one sleeps): what
    others are using now. None where /proc/stat is not there."""
    before = cpu_counters()
    time.sleep(seconds)
    return others_cpu_share(before, cpu_counters())


def machine_busy() -> str | None:
    """A sentence when the machine is already busy as a run starts (others use more than BUSY_SHARE of
    the cores, measured over half a second; the load average lags a minute behind and would flag the
    run that just ended), else None: times measured now will be slower and noisier."""
    busy = cpu_busy(BUSY_SAMPLE_S)
    if busy is None or busy <= BUSY_SHARE:
        return None
    cores = os.cpu_count() or 1
    return (f"this machine is already busy (other processes use {busy:.0%} of its {cores} cores); times "
            f"measured now are slower and noisier: wait for it to quieten, or compare normalised times")
