"""The tidy table from runner folders and asv results (written with asv's own Results API)."""

import json
import os
import shutil

import pytest
from asv.results import Results
from asv.runner import BenchmarkResult
from run_helpers import quick_measuring

from benchmarks import cases
from benchmarks.core import records
from benchmarks.core.hardware import machine
from benchmarks.core.running import runner
from reports import tidy

PLAN = [("multihead", {"heads": 8, "strategy": "looped", "out_proj": True, "device": "cpu"}),
        ("threads", {"workload": "multihead", "threads": 1})]


@pytest.fixture(scope="module")
def measured_once(tmp_path_factory):
    """One short sweep for the module; each test gets its own copy (runner_folder)."""
    out = tmp_path_factory.mktemp("measured") / "run"
    with quick_measuring() as mp:
        mp.setattr(machine, "calibrate", lambda threads=(), fresh=False: {
            machine.peak_key("cpu", "float32", t): 2e11 for t in (None, *threads)})
        runner.Runner(str(out), min_run_time=0.01, name="laptop").run(PLAN, progress=False)
    return out


@pytest.fixture
def runner_folder(measured_once, tmp_path):
    shutil.copytree(measured_once, tmp_path / "run")
    return str(tmp_path / "run")


def test_runner_rows_one_per_case_method_and_metric(runner_folder):
    t = tidy.load([runner_folder])
    assert list(t.columns) == tidy.COLUMNS
    assert set(t.machine) == {"laptop"} and set(t.source) == {"runner"}
    mh = t[(t.area == "multihead") & (t.method == "forward")]
    assert set(mh.metric) >= {"time", "matmul_flops", "achieved_flops_per_s", "fraction_of_peak", "tokens_per_s"}
    assert mh.set_index("metric").value.size == mh.metric.nunique()  # one row per metric
    time = mh[mh.metric == "time"].iloc[0]
    assert time.q25 <= time.value <= time.q75 and time.iqr == pytest.approx(time.q75 - time.q25)
    assert time.samples >= 1 and time.samples == json.load(open(os.path.join(
        runner_folder, "cases", records.case_key("multihead", "forward", PLAN[0][1]) + ".json")))["blocks"]
    assert time.heads == 8 and time.strategy == "looped" and time.unit == "s"
    peaks = t[t.metric == "gemm_peak_flops_per_s"]
    assert set(peaks.threads) == {1, machine.metadata()["torch_threads"]} and (peaks.value == 2e11).all()
    assert (t[(t.area == "threads") & (t.metric == "time")].threads == 1).all()


def test_failed_cases_are_rows_with_their_status(runner_folder):
    rec = {"area": "attention", "method": "forward", "status": "oom", "reason": "out of memory",
           "params": {"seq_len": 8192, "d_head": 64, "backend": "math", "causal": False, "dtype": "float32",
                      "device": "cuda"}, "commit": records.commit()}
    name = records.case_key("attention", "forward", rec["params"]) + ".json"
    records.write_json_atomic(os.path.join(runner_folder, "cases", name), rec)
    row = tidy.load([runner_folder]).query("status == 'oom'").iloc[0]
    assert row.seq_len == 8192 and row.reason == "out of memory" and row.value != row.value  # NaN


def write_asv_results(root, machine_name="box", commit="a" * 40, times=(0.012, 0.022)):
    os.makedirs(os.path.join(root, machine_name))
    with open(os.path.join(root, machine_name, "machine.json"), "w") as f:
        json.dump({"arch": "x86_64", "cpu": "Test CPU", "machine": machine_name, "num_cpu": "4", "os": "Linux",
                   "ram": "1", "version": 1}, f)
    res = Results({"machine": machine_name, "cpu": "Test CPU", "num_cpu": "4", "python": "3.11",
                   "torch": "2.13.0"}, {"torch": "2.13.0"}, commit, 0, "3.11", "virtualenv-py3.11-torch2.13.0", {})
    params = [["1", "8"], ["'batched'"], ["True"], ["'cpu'", "'cuda'"]]
    around = lambda t: [t - 0.002, t - 0.001, t, t + 0.001, t + 0.002]  # noqa: E731
    samples = [around(times[0]), None, around(times[1]), None]
    res.add_result({"name": "bench_multihead.MultiHeadAttention.time_forward", "params": params, "version": "1"},
                   BenchmarkResult(result=[times[0], float("nan"), times[1], float("nan")], samples=samples,
                                   number=[1, None, 1, None], errcode=0, stderr="", profile=None),
                   record_samples=True)
    res.add_result({"name": "bench_multihead.MultiHeadAttention.track_matmul_flops", "params": params,
                    "version": "1"},
                   BenchmarkResult(result=[5.0e9, float("nan"), 5.0e9, float("nan")], samples=[None] * 4,
                                   number=[None] * 4, errcode=0, stderr="", profile=None))
    res.save(root)


def test_asv_results_become_the_same_columns(tmp_path):
    root = str(tmp_path / ".asv" / "results")
    write_asv_results(root)
    t = tidy.load([root])
    assert list(t.columns) == tidy.COLUMNS and set(t.source) == {"asv"} and set(t.machine) == {"box"}
    times = t[(t.metric == "time") & (t.status == "ok")].sort_values("heads")
    assert list(times.heads) == [1, 8] and list(times.device) == ["cpu", "cpu"]
    assert times.iloc[0].value == pytest.approx(0.012)
    assert times.iloc[0].q25 <= times.iloc[0].value <= times.iloc[0].q75
    assert list(times.samples) == [5, 5]  # asv's repeat count: how many values its quartiles are over
    assert (t[t.device == "cuda"].status == "skipped").all()
    flops = t[t.metric == "matmul_flops"].dropna(subset=["value"])
    assert set(flops.unit) == {"FLOP"} and set(flops.method) == {"forward"}
    assert set(t.cpu_model) == {"Test CPU"}
    throughput = t[t.metric == "tokens_per_s"].sort_values("heads")
    shape = cases.MULTIHEAD_SHAPE
    assert list(throughput.value) == pytest.approx([shape["batch"] * shape["seq_len"] / v for v in (0.012, 0.022)])


def test_asv_metadata_sidecar_supplies_the_machine_facts(tmp_path):
    root = str(tmp_path / ".asv" / "results")
    write_asv_results(root)
    meta = {**machine.metadata(), "hostname": "box", "gpu_name": "NVIDIA H200"}
    records.write_json_atomic(str(tmp_path / ".asv" / "metadata" / "virtualenv-py3.11-torch2.13.0-box.json"),
                              {"machine": meta, "gemm_peaks": {}})
    assert set(tidy.load([root]).gpu_name) == {"NVIDIA H200"}


def test_several_machines_make_one_table(tmp_path, runner_folder):
    root = str(tmp_path / ".asv" / "results")
    write_asv_results(root)
    t = tidy.load([runner_folder, root])
    assert set(t.machine) == {"laptop", "box"} and set(t.source) == {"runner", "asv"}


@pytest.mark.parametrize("name, expected", [
    ("time_forward", ("forward", "time")), ("time_train_step", ("train_step", "time")),
    ("peakmem_forward", ("forward", "peak_rss")), ("track_generate_matmul_flops", ("generate", "matmul_flops")),
    ("track_gpu_power_w", ("forward", "gpu_power_w")),
    ("track_gemm_peak_flops_per_s", ("matmul", "gemm_peak_flops_per_s")),
    ("time_matmul", ("matmul", "time"))])
def test_asv_method_names_map_to_method_and_metric(name, expected):
    assert tidy.asv_method_metric(name) == expected


def test_every_asv_benchmark_maps_to_a_known_metric():
    from benchmarks import bench_calibration, common

    names = [n for cls in (common._CaseBenchmark, bench_calibration.GemmPeak) for n in dir(cls)
             if n.startswith(("time_", "track_", "peakmem_"))]
    assert all(tidy.asv_method_metric(n)[1] in tidy.UNITS for n in names)


def test_bad_paths_say_what_is_expected(tmp_path):
    with pytest.raises(ValueError, match="neither a runner output folder"):
        tidy.load([str(tmp_path)])
    with pytest.raises(ValueError, match="no results given"):
        tidy.load([])
