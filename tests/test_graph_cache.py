"""What a case's call executes is counted once per version of the code: a later run of the same code reads it,
and a change to transformer/ or benchmarks/ counts it again, but one to the code that only times or compares
cases built elsewhere (the pairs, the gate)."""

import os
import shutil

import pytest
import torch

from benchmarks.core import opgraph
from benchmarks.core.timing import graph_cache

CASE = {"area": "toy", "method": "forward", "params": {"n": 8}}


def test_a_count_is_read_back_for_the_same_code_and_case_and_counted_again_for_another(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_BENCH_CACHE", str(tmp_path))
    x = torch.randn(8, 8)
    ops, dispatches = graph_cache.counted(CASE, lambda: (x @ x).relu(), 1 << 20)
    assert {op["name"] for op in ops} == {"aten.mm.default", "aten.relu.default"} and dispatches["line"] >= 1

    def fail(fn, lines=False):
        raise AssertionError("counted again")

    with monkeypatch.context() as m:
        m.setattr(opgraph, "record", fail)
        assert graph_cache.counted(CASE, lambda: (x @ x).relu(), 1 << 20) == (ops, dispatches)  # read back
        for other in ({**CASE, "params": {"n": 16}}, None):  # another case; a call that names none
            with pytest.raises(AssertionError, match="counted again"):
                graph_cache.counted(other, lambda: (x @ x).relu(), 1 << 20)
        with pytest.raises(AssertionError, match="counted again"):
            graph_cache.counted(CASE, lambda: (x @ x).relu(), 1 << 10)  # cold bytes against another cache size
        m.setattr(graph_cache, "code_digest", lambda: "another version")
        with pytest.raises(AssertionError, match="counted again"):
            graph_cache.counted(CASE, lambda: (x @ x).relu(), 1 << 20)
    (tmp_path / "graphs" / os.listdir(tmp_path / "graphs")[0]).write_text('{"key": ')  # a damaged file
    assert graph_cache.counted(CASE, lambda: (x @ x).relu(), 1 << 20) == (ops, dispatches)  # counted over


def test_the_code_digest_changes_with_the_models_and_the_cases_but_not_with_the_code_that_times_them(tmp_path):
    for package in graph_cache.PACKAGES:
        shutil.copytree(os.path.join(graph_cache.ROOT, package), tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    before = graph_cache.code_digest(str(tmp_path))
    assert before == graph_cache.code_digest.__wrapped__(graph_cache.ROOT)  # the same files, the same digest
    for kept in graph_cache.NOT_THE_CALL:  # the pairs, the gate, the profiles: they time cases the areas build
        targets = sorted((tmp_path / kept).glob("*.py")) if kept.endswith("/") else [tmp_path / kept]
        assert targets and all(t.exists() for t in targets), kept
        for target in targets:
            with open(target, "a") as f:
                f.write("\n# changed\n")
    assert graph_cache.code_digest.__wrapped__(str(tmp_path)) == before
    for changed in ("transformer/attention.py", "benchmarks/bench_multihead.py", "benchmarks/core/opgraph.py"):
        with open(tmp_path / changed, "a") as f:
            f.write("\n# changed\n")
        assert graph_cache.code_digest.__wrapped__(str(tmp_path)) != before, changed
        before = graph_cache.code_digest.__wrapped__(str(tmp_path))


def test_a_depth_cases_graph_is_recorded_once_per_version_of_the_code(tmp_path, monkeypatch):
    from benchmarks import cases
    from benchmarks.core.timing import measure

    monkeypatch.setenv("ATTENTION_BENCH_CACHE", str(tmp_path))
    params = {"model": "transformer", "preset": "tiny", "mode": "forward", "seq_len": 4, "device": "cpu"}
    case, identity = cases.build("depth", params), {"area": "depth", "params": params}
    first = measure.graph_metrics(case, identity)
    assert first == measure.graph_metrics(case)  # as recorded without the cache
    assert first["sequential_depth"] > 0 and first["counted_matmul_flops"] == first["matmul_flops"]

    def fail(fn, lines=False):
        raise AssertionError("recorded again")

    with monkeypatch.context() as m:
        m.setattr(opgraph, "record", fail)
        assert measure.graph_metrics(case, identity) == first  # read back
        m.setattr(graph_cache, "code_digest", lambda: "another version")
        with pytest.raises(AssertionError, match="recorded again"):
            measure.graph_metrics(case, identity)
