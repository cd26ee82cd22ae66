"""The verdicts' ratios timed paired (benchmarks.pairs): which cases are paired, the mirrored order of two
cases in one worker, the command end to end, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from benchmarks import cases, pairs
from benchmarks.core import paired
from reports import measured


def test_c1_pairs_the_transformer_with_the_width_matched_rnn_at_every_size_and_length():
    got = pairs.pairs_of("c1", "default", "cpu")
    transformers = cases.select("models", "default", device="cpu", model="transformer")
    assert len(got) == len(transformers)
    for (area_a, a, method_a), (area_b, b, method_b) in got:
        assert area_a == area_b == "models" and method_a == method_b == "forward"
        assert a["model"] == "transformer" and b == {**a, "model": "rnn-width"}


def test_heads_pairs_one_head_with_64_per_strategy_with_the_output_projection():
    got = pairs.pairs_of("heads", "default", "cpu")
    assert {a["strategy"] for (_, a, _), _ in got} == set(cases.axes("multihead", "default")["strategy"])
    for (_, a, _), (_, b, _) in got:
        assert a["heads"] == 1 and b == {**a, "heads": 64} and a["out_proj"] is True


class OneWorker:
    """Stands in for a worker process holding every case: logs which case each block times."""

    label = "cases"

    def __init__(self):
        self.blocks = []

    def start(self, todo):
        return [None] * len(todo)

    def ask(self, request):
        if "case" in request:
            self.blocks.append(request["case"])
        return {"seconds": 0.002 if request.get("case", request.get("probe")) == 0 else 0.004}

    def stop(self):
        pass


def test_two_cases_in_one_worker_alternate_mirrored_and_give_the_ratio_of_their_times():
    w = OneWorker()
    todo = [("attention", {}, "forward"), ("attention", {"x": 1}, "forward")]
    rounds = paired.MirroredRounds([w], todo, [(paired.Side(w, 0), paired.Side(w, 1))], block_s=0.01)
    rounds.start()
    for r in range(4):
        rounds.round(r)
    assert w.blocks[:8] == [0, 1, 1, 0, 1, 0, 0, 1]
    assert rounds.calls == [round(0.01 / 0.004)]  # sized from the slower side
    est = rounds.estimates()[0]
    assert est.ratio == pytest.approx(2.0) and est.rounds == 4


@pytest.mark.slow
def test_the_command_times_the_pairs_and_saves_a_record_the_docs_render(tmp_path):
    record = tmp_path / "pairs.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.pairs", "--grid", "quick", "--only", "c1", "--budget",
                           "3", "--record", str(record), "--no-progress"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    saved = json.loads(record.read_text())
    assert saved["kind"] == "pairs" and len(saved["pairs"]) == len(pairs.pairs_of("c1", "quick", "cpu"))
    for p in saved["pairs"]:
        assert p["status"] == "ok" and p["low"] <= p["ratio"] <= p["high"] and p["rounds"] == saved["rounds"]
        assert len(p["round_ratios"]) == p["rounds"] and p["a_s"] > 0 and p["b_s"] > 0
    block = measured.markdown(saved, str(record))
    assert block.count("| Transformer speed-up") == len(saved["pairs"])


def test_bad_input_is_a_clear_error(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "benchmarks.pairs", *args, "--record",
                               str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)

    done = run("--only", "c9")
    assert done.returncode == 2 and "invalid choice: 'c9'" in done.stderr
    done = run("--budget", "0")
    assert done.returncode == 2 and "finite number of seconds > 0" in done.stderr
    if not torch.cuda.is_available():
        done = run("--device", "cuda")
        assert done.returncode == 2 and "cuda" in done.stderr and not (tmp_path / "r.json").exists()
