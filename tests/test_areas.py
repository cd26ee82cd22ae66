"""An area is one module: its definition is checked, and a new one (a toy area written into a copy of the project,
plus its line in ``cases.AREAS``) is measured, profiled, reported and collected by asv with nothing else changed."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from benchmarks import cases
from benchmarks.area import Area
from benchmarks.bench_attention import AREA as ATTENTION

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = os.path.join(ROOT, "tests", "data", "bench_toy.py")


def _toy_area(**changes) -> Area:
    fields = dict(name="toy", axes={g: {"n": [64]} for g in ("quick", "default", "full")}, build=lambda n: None,
                  tokens=lambda params, method="forward": params["n"])
    return Area(**{**fields, **changes})


def test_an_area_gives_axes_for_every_grid():
    with pytest.raises(ValueError, match=r"area 'toy' gives axes for grids \['quick'\]; give every grid: quick, "
                                         r"default, full"):
        _toy_area(axes={"quick": {"n": [64]}})


def test_an_area_has_known_methods_and_no_empty_axis():
    with pytest.raises(ValueError, match=r"methods \['forward', 'backward'\]; allowed: forward, train_step"):
        _toy_area(methods=("forward", "backward"))
    with pytest.raises(ValueError, match=r"grid 'quick': every axis needs values; empty: \['n'\]"):
        _toy_area(axes={"quick": {"n": []}, "default": {"n": [1]}, "full": {"n": [1]}})


def test_a_label_means_one_component_across_areas(monkeypatch):
    clash = _toy_area(components={"attention.softmax": "normalisation"})
    monkeypatch.setattr(cases, "AREAS", {**cases.AREAS, "toy": clash})
    with pytest.raises(ValueError, match="label 'attention.softmax' is 'softmax' in one area and 'normalisation' in"):
        cases.components()


def test_the_facade_reads_each_area_definition(monkeypatch):
    """``cases`` answers from the definition: a changed axis, keep rule or token count shows everywhere."""
    assert cases.axes("attention", "quick") == dict(ATTENTION.axes["quick"])
    changed = dataclasses.replace(ATTENTION, keep={"quick": lambda p: p["backend"] == "sdpa"},
                                  tokens=lambda params, method="forward": 7)
    monkeypatch.setattr(cases, "AREAS", {**cases.AREAS, "attention": changed})
    assert {p["backend"] for p in cases.combinations("attention", "quick")} == {"sdpa"}
    assert cases.tokens("attention", {"seq_len": 128, "device": "cpu"}) == 7
    with pytest.raises(ValueError, match="unknown area 'nope'; allowed: attention, multihead"):
        cases.build("nope", {})


def _copy_project(dest) -> str:
    for name in ("attention_bench", "benchmarks", "reports", "transformer"):
        shutil.copytree(os.path.join(ROOT, name), dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "asv.conf.json"):
        shutil.copy(os.path.join(ROOT, name), dest)
    return str(dest)


def _command(copy: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": copy}  # the session's cache (conftest): its constants measured once
    return subprocess.run([sys.executable, "-m", "attention_bench", *args], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_a_new_area_is_one_module_and_a_line_in_the_registry(tmp_path):
    copy = _copy_project(tmp_path / "project")
    shutil.copy(TOY, os.path.join(copy, "benchmarks", "bench_toy.py"))
    run, report = os.path.join(copy, "run"), os.path.join(copy, "report")
    profile = ["profile", "--grid", "quick", "--area", "toy", "--param", "n=128", "--out", run, "--no-progress"]
    before = _command(copy, *profile)  # the module alone is not an area yet: the registry lists the areas
    assert before.returncode == 2 and "invalid choice: 'toy'" in before.stderr

    registry = os.path.join(copy, "benchmarks", "cases.py")
    with open(registry) as f:
        text = f.read()
    text = text.replace("from . import bench_attention,", "from . import bench_toy\nfrom . import bench_attention,")
    text = text.replace("    bench_depth.AREA,\n", "    bench_depth.AREA,\n    bench_toy.AREA,\n")
    with open(registry, "w") as f:
        f.write(text)

    profiled = _command(copy, *profile)
    assert profiled.returncode == 0, profiled.stderr
    done = _command(copy, "run", "--grid", "quick", "--area", "toy", "--rounds", "1", "--min-run-time", "0.02",
                    "--pairs-budget", "0", "--no-progress", "--out", run, "--report", report, "--machine", "toyvm")
    assert done.returncode == 0, done.stderr
    records = [json.load(open(os.path.join(run, "cases", f))) for f in sorted(os.listdir(os.path.join(run, "cases")))]
    assert sorted(r["params"]["n"] for r in records) == [64, 128]
    for r in records:
        assert r["area"] == "toy" and r["status"] == "ok" and r["tokens"] == r["params"]["n"]
        assert r["matmul_flops"] == 2 * r["params"]["n"] ** 3

    table = pd.read_csv(os.path.join(report, "results.csv"))
    assert set(table[table.metric == "time"].area) == {"toy"}
    page = open(os.path.join(report, "index.html")).read()
    assert "toy product" in page and os.path.exists(os.path.join(report, "profiling_shares_toy.png"))

    discover = ("import json; from asv_runner.discovery import disc_benchmarks\n"
                "print(json.dumps({b.name: b.params for b in disc_benchmarks('benchmarks')}))")
    found = subprocess.run([sys.executable, "-c", discover], cwd=copy, env={**os.environ, "PYTHONPATH": copy},
                           capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stderr
    names = json.loads(found.stdout.splitlines()[-1])
    assert names["bench_toy.ToyProduct.time_forward"] == [["64", "128"], ["'cpu'"]]
    assert "bench_attention.ScaledDotProductAttention.time_forward" in names
