"""scripts/plain_pair.py: the plain check of C1, with both models in one bare process or, with --apart, each
alone in processes of its own, alternated."""

import json
import types

from scripts import plain_pair


def test_apart_alternates_the_sides_processes_and_gives_the_median_times_ratio(monkeypatch):
    started = []
    seconds = {0: [0.010, 0.012, 0.011], 1: [0.030, 0.024, 0.033]}  # each process's median, by side in order

    def run(argv, **kwargs):
        side = int(argv[argv.index("--side") + 1])
        started.append(side)
        s = seconds[side][sum(1 for x in started if x == side) - 1]
        return types.SimpleNamespace(stdout=json.dumps({"s": s, "faults_per_call": 7.0 * side}))

    monkeypatch.setattr(plain_pair.subprocess, "run", run)
    line = plain_pair.apart("C1 tiny n=128", 3, 4)
    assert started == [0, 1, 1, 0, 0, 1]  # a b, then b a, then a b
    assert "ratio (b/a) 2.727" in line  # median 30 ms over median 11 ms
    assert "pairs of processes 2.000, 3.000, 3.000" in line and "page faults per call a 0, 0, 0, b 7, 7, 7" in line


def test_one_side_builds_and_times_that_model_alone():
    got = plain_pair.one_side("C1 tiny n=128", 1, 2)
    assert got["side"] == 1 and got["s"] > 0 and got["faults_per_call"] >= 0
