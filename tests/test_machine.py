"""Machine metadata, thread counts, GEMM calibration and NVML telemetry (with a fake NVML)."""

import os
import types

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import cases
from benchmarks.core.hardware import control, machine
from benchmarks.core.timing import telemetry


@given(st.integers(1, 512))
def test_thread_counts_go_from_one_to_all_cores_in_powers_of_two(n):
    counts = cases.thread_counts(n)
    assert counts[0] == 1 and counts[-1] == n and counts == sorted(set(counts))
    assert all(c & (c - 1) == 0 for c in counts[:-1])  # powers of two below all cores
    assert len(counts) == n.bit_length() + (n & (n - 1) != 0)


def test_metadata_names_the_machine_and_its_software():
    meta = machine.metadata()
    assert meta["cpu_count"] == os.cpu_count() and meta["torch"] == torch.__version__
    assert meta["torch_threads"] == torch.get_num_threads() and meta["cpu_model"]
    if torch.backends.mkl.is_available():
        assert meta["mkl"] and meta["mkl"][0].isdigit()
    if not torch.cuda.is_available():
        assert meta["gpu_name"] is None and meta["gpu_count"] == 0


def test_free_page_reporting_is_a_balloon_that_offers_it(tmp_path):
    def device(name, kind, features):
        (tmp_path / name).mkdir()
        (tmp_path / name / "device").write_text(kind + "\n")
        (tmp_path / name / "features").write_text(features + "\n")

    device("virtio0", "0x0002", "0000010000")  # a disk: its feature 5 is another feature
    assert machine.free_page_reporting(str(tmp_path)) is False
    device("virtio1", machine.BALLOON, "0110000000")  # a balloon without free page reporting
    assert machine.free_page_reporting(str(tmp_path)) is False
    device("virtio2", machine.BALLOON, "0110010100")  # with it (feature 5)
    assert machine.free_page_reporting(str(tmp_path)) is True
    assert machine.free_page_reporting(str(tmp_path / "none")) is None  # not a virtio guest
    assert machine.metadata()["free_page_reporting"] == machine.free_page_reporting()


def test_gemm_rate_is_flops_over_time():
    rate = machine.gemm_flops_per_s(256, min_run_time=0.05)
    assert 1e8 < rate < 1e14
    assert machine.peak_key("cpu", "float32", None) == f"cpu/float32/{torch.get_num_threads()}"  # one peak per count


def test_the_control_times_one_block_of_the_calls_its_seconds_hold(monkeypatch):
    """The control beside every CPU timing: one call, then one block of as many calls as ``seconds`` holds at
    that call's speed; its rate is that block's (how fast the machine is does not enter the check)."""
    timed = []
    real = control.tbench.Timer.timeit

    def recording(self, number):
        m = real(self, number)
        timed.append((number, m.median))
        return m

    monkeypatch.setattr(control.tbench.Timer, "timeit", recording)
    rate = control.gemm_flops_per_s_within(256, 0.01)
    (one, one_s), (calls, block_s) = timed
    assert one == 1 and calls == max(1, round(0.01 / one_s))
    assert rate == 2 * 256**3 / block_s


def test_asv_metadata_path_only_inside_asv(monkeypatch):
    monkeypatch.delenv("ASV_CONF_DIR", raising=False)
    assert machine.asv_metadata_path() is None
    monkeypatch.setenv("ASV_CONF_DIR", "/r")
    monkeypatch.setenv("ASV_ENV_NAME", "existing-py")
    assert machine.asv_metadata_path().startswith("/r/.asv/metadata/existing-py-")


def test_telemetry_energy_from_the_counter_or_from_integrated_power():
    readings = [(0.0, 300.0, 1900, 2600, 90), (0.5, 500.0, 1700, 2600, 100)]
    counted = telemetry.summarize(readings, calls=10, elapsed=2.0, energy_start_mj=1000.0, energy_end_mj=801000.0)
    assert counted.power_w == 400.0 and counted.sm_clock_mhz == 1800 and counted.utilization_pct == 95
    assert counted.energy_j == 800.0 and counted.energy_per_call_j() == 80.0
    integrated = telemetry.summarize(readings, calls=10, elapsed=2.0, energy_start_mj=None, energy_end_mj=None)
    assert integrated.energy_j == 800.0  # 400 W for 2 s
    with pytest.raises(RuntimeError, match="no readings"):
        telemetry.summarize([], 1, 1.0, None, None)


def test_telemetry_sampling_with_a_fake_nvml(monkeypatch):
    energy = iter([5_000.0, 7_000.0])
    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPowerUsage=lambda h: 250_000, nvmlDeviceGetClockInfo=lambda h, c: 1500 if c == 0 else 2600,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=80),
        nvmlDeviceGetTotalEnergyConsumption=lambda h: next(energy))
    monkeypatch.setattr(telemetry, "pynvml", fake)
    assert telemetry.available()
    calls = []
    t = telemetry.sample(lambda: calls.append(1), min_time=0.05, interval=0.005)
    assert t.calls == len(calls) > 0 and t.samples >= 1
    assert (t.power_w, t.sm_clock_mhz, t.mem_clock_mhz, t.utilization_pct) == (250.0, 1500, 2600, 80)
    assert t.energy_j == 2.0


def test_telemetry_unavailable_without_nvml(monkeypatch):
    def broken():
        raise OSError("NVML Shared Library Not Found")

    monkeypatch.setattr(telemetry, "pynvml", types.SimpleNamespace(nvmlInit=broken))
    assert not telemetry.available()


def test_the_pages_machine_table_says_whether_the_machine_hands_free_memory_to_its_host():
    import pandas as pd

    from reports import html

    row = {"source": "runner", "env": "torch 2", "cpu_model": "cpu", "cpu_count": 2, "torch": "2", "cuda": None,
           "gpu_name": None, "gpu_memory_bytes": None, "metric": "gemm_peak_flops_per_s", "device": "cpu",
           "dtype": "float32", "value": 2e11}
    t = pd.DataFrame([{**row, "machine": "vm", "free_page_reporting": True},
                      {**row, "machine": "box", "free_page_reporting": False}])
    shown = html._machines(t)
    assert bool(shown.loc["vm", "free_page_reporting"]) and not bool(shown.loc["box", "free_page_reporting"])
    assert "free_page_reporting" not in html._machines(t.drop(columns="free_page_reporting").assign(
        free_page_reporting=None)).dropna(axis=1).columns  # a machine that does not say: a dash
