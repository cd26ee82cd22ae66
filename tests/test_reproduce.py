"""Reproducibility over run folders of one machine: each figure per run with the interval each run states, and
the figures that fall outside another run's interval (or ±5% where it states none)."""

import json
import os
import shutil

import numpy as np
import pytest
from run_helpers import PLAN, measure, measured_run

from attention_bench.cli import main as attention_bench
from reports import explained, measured, reproduce


def _run(name, machine="vm", quoted=(), **figures):
    return {"run": name, "machine": machine, "cpu": "EPYC, 2 cores, torch 2.13", "commit": "abc",
            "figures": figures, "quoted": list(quoted)}


def test_runs_that_agree_within_their_intervals_have_nothing_outside():
    runs = [_run("a", x=(5.0, 4.8, 5.3), y=(1.00, None, None)),
            _run("b", x=(5.1, 4.9, 5.4), y=(1.03, None, None)),
            _run("c", x=(4.9, 4.7, 5.2), y=(0.99, None, None))]
    t = reproduce.table(runs)
    assert list(t.outside) == [0, 0] and list(t.pairs) == [6, 6]
    assert reproduce.summary(t) == {"figures": 2, "with_interval": 1, "outside": 0, "outside_with_interval": 0,
                                    "checks_with_interval": 6, "checks_outside": 0, "quoted": 0,
                                    "quoted_outside": 0, "quoted_checks": 0, "quoted_checks_outside": 0,
                                    "median_half_width": pytest.approx(0.05, abs=0.003),
                                    "tolerance": reproduce.TOLERANCE}


def test_a_figure_outside_another_runs_interval_is_counted_each_way():
    runs = [_run("a", x=(5.0, 4.9, 5.1), y=(1.00, None, None)),
            _run("b", x=(6.0, 5.9, 6.1), y=(1.07, None, None))]  # 20% apart; y 7% apart without an interval
    t = reproduce.table(runs).set_index("figure")
    assert t.loc["x", "outside"] == 2 and t.loc["y", "outside"] == 2
    assert t.loc["x", "spread"] == pytest.approx(0.2)
    quoted = reproduce.summary(reproduce.table([_run("a", quoted=["y"], x=(5.0, 4.9, 5.1), y=(1.00, None, None)),
                                                _run("b", quoted=["y"], x=(6.0, 5.9, 6.1), y=(1.03, None, None))]))
    assert (quoted["quoted"], quoted["quoted_outside"], quoted["quoted_checks"]) == (1, 0, 2)  # the answers' y holds
    one_way = reproduce.table([_run("a", x=(5.0, 4.0, 6.0)), _run("b", x=(5.8, 5.7, 5.9))]).set_index("figure")
    assert one_way.loc["x", "outside"] == 1  # 5.0 lies outside b's narrow interval, 5.8 inside a's wide one


def test_runs_of_two_machines_or_a_single_run_are_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"not of one machine \(a: vm .*b: laptop"):
        reproduce.table([_run("a", x=(1.0, None, None)), _run("b", machine="laptop", x=(1.0, None, None))])
    with pytest.raises(ValueError, match="two runs or more; got 1"):
        reproduce.table([_run("a", x=(1.0, None, None))])


def test_the_command_reads_run_folders_and_refuses_another_machines(tmp_path, capsys, fake_peaks):
    first = measured_run(tmp_path / "one")
    second = str(tmp_path / "two")
    shutil.copytree(first, second)
    record = str(tmp_path / "repro.json")
    assert attention_bench(["reproduce", first, second, "--record", record]) == 0
    out = capsys.readouterr().out
    assert "2 runs of vm" in out and "0 fall outside another run's interval" in out
    saved = json.load(open(record))
    assert saved["kind"] == "reproducibility" and saved["summary"]["figures"] > 0
    assert any(f["figure"].startswith("c1_length.speedup_") for f in saved["figures"])
    assert {f["figure"] for f in saved["figures"] if f["quoted"]} >= {"c1_length.speedup_cpu_tiny_n16"}
    # how fast the host let each run's cores go: the control GEMM's median over the run's rounds, per thread count
    controls = {}
    for name in os.listdir(os.path.join(first, "cases")):
        rec = json.load(open(os.path.join(first, "cases", name)))
        controls.setdefault(str(rec.get("threads")), []).extend(
            r["control_flops_per_s"] for r in rec.get("rounds") or () if r.get("control_flops_per_s"))
    host = saved["runs"][0]["host"]
    assert host and host == pytest.approx({t: float(np.median(x)) for t, x in controls.items() if x})
    said = f"run 1 {next(iter(host.values())) / 1e9:.0f} GFLOP/s on"
    assert "The host, by the control GEMM's median rate" in out and said in out
    assert said in measured.markdown(saved, record)
    other = measure(tmp_path / "three", PLAN, name="laptop")
    assert attention_bench(["reproduce", first, other]) == 2
    assert "not of one machine" in capsys.readouterr().err
    assert attention_bench(["reproduce", first, str(tmp_path)]) == 2
    assert "is not a run folder" in capsys.readouterr().err
    assert os.path.exists(record)


def test_compare_says_per_figure_whether_two_runs_differ_or_are_the_same_within_the_noise():
    a = _run("a", x=(5.0, 4.9, 5.1), y=(1.00, None, None), z=(2.0, 1.5, 2.5), w=(2.0, 1.5, 2.5),
             only_a=(1.0, None, None))
    b = _run("b", machine="laptop", x=(6.0, 5.9, 6.1), y=(1.03, None, None), z=(2.3, 2.1, 2.5),
             w=(2.6, 2.4, 2.8))  # any machines
    d = reproduce.differences(a, b).set_index("figure")
    assert list(d.index) == ["x", "y", "z", "w"]  # only figures both runs have
    assert d.loc["x", "verdict"] == "differs" and d.loc["x", "change"] == pytest.approx(0.2)
    assert d.loc["y", "verdict"] == "same within the noise"  # 3%, no interval: within ±5%
    assert d.loc["z", "verdict"] == "same within the noise"  # 15% apart, within what the two intervals allow
    assert d.loc["w", "verdict"] == "differs"  # the intervals overlap (2.4-2.5), yet 30% is beyond them
    far = reproduce.differences(_run("a", y=(1.00, None, None)), _run("b", y=(1.07, None, None)))
    assert far.verdict.iloc[0] == "differs"  # 7% without an interval
    # a count whose interval reaches 0 has no log distance: held to the intervals themselves
    counts = reproduce.differences(_run("a", n=(1.0, 0.0, 3.0)), _run("b", n=(1.0, 0.0, 3.0)))
    assert counts.verdict.iloc[0] == "same within the noise"
    assert reproduce.differences(_run("a", n=(1.0, 0.0, 3.0)), _run("b", n=(9.0, 6.0, 12.0))).verdict.iloc[0] == \
        "differs"


def test_compare_puts_the_change_the_constants_predict_beside_the_change_measured(tmp_path, capsys, fake_peaks):
    first = measured_run(tmp_path / "one")
    second = str(tmp_path / "two")
    shutil.copytree(first, second)
    assert explained.factors(first, second) and set(explained.factors(first, second).values()) == {1.0}
    meta = os.path.join(second, "machine.json")
    saved = json.load(open(meta))
    for c in saved["constants"].values():  # a machine whose kernels and memory run 10x faster, its host the same
        for kernel in c["kernels"].values():  # (kernels alone would leave a call whose every operator the quick
            kernel["flops_per_s"] = [r * 10 for r in kernel["flops_per_s"]]  # constants price by its bytes as it was)
        c["copy_bytes_per_s"], c["triad_bytes_per_s"] = c["copy_bytes_per_s"] * 10, c["triad_bytes_per_s"] * 10
        for rate in ("copy_bytes_per_s", "fresh_bytes_per_s"):
            c["memory"][rate] = [r * 10 for r in c["memory"][rate]]
        for name, rates in c["pointwise"]["written_bytes_per_s"].items():
            c["pointwise"]["written_bytes_per_s"][name] = [r * 10 for r in rates]
    json.dump(saved, open(meta, "w"))
    f = explained.factors(first, second)
    by_model = {dict(params)["model"]: v for (_, method, params), v in f.items() if method == "forward"}
    assert 1.0 not in by_model.values() and by_model["transformer"] != by_model["rnn-width"]
    predicted = reproduce.figures(first, explained.predicted_table(first, second))
    d = reproduce.differences(reproduce.figures(first), reproduce.figures(second), predicted["figures"])
    row = d.set_index("figure").loc["c1_length.speedup_cpu_tiny_n16"]
    assert row.change == 0  # the same cases measured: nothing moved...
    assert row["predicted change"] == pytest.approx(by_model["rnn-width"] / by_model["transformer"] - 1)  # ...the model
    assert attention_bench(["compare", first, second, "--report", str(tmp_path / "report")]) == 0
    assert "predicted change" in capsys.readouterr().out
