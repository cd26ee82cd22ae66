"""The verdicts' ratios timed paired (benchmarks.pairs): which cases are paired, the mirrored order of two
cases in one worker, the command end to end, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from run_helpers import StandInWorker, in_process
from run_helpers import paired_row as pair
from run_helpers import pairs_record as record

from attention_bench.cli import main as attention_bench
from benchmarks import cases, pairs
from benchmarks.core import envelope
from benchmarks.core.pairing import mirrored, workers
from benchmarks.core.pairing.mirrored_worker import case_of
from reports import measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


class OneWorker(StandInWorker):
    """Stands in for a worker process: logs which case each block times. A call takes 2 ms, but 4 ms for a pair's
    b side: the worker's own side where it is one ("c1 rnn-width": ``pairs.SEPARATE``), else every case after the
    first it holds."""

    regime, settle = {"threads": 1, "env": {}}, 0

    def __init__(self, label="cases", *args, **kwargs):  # as benchmarks.pairs makes one: a label, then its folders
        self.label, self.blocks = label, []

    def start(self, todo):
        return [None] * len(todo)

    def ask(self, request, timeout=None):
        if "case" in request:
            self.blocks.append(request["case"])
        kind, _, side = self.label.partition(" ")
        b = side == str(pairs.KINDS[kind][4]) if side else case_of(request) != 0
        return {"seconds": 0.004 if b else 0.002}


def test_two_cases_in_one_worker_alternate_mirrored_and_give_the_ratio_of_their_times():
    w = OneWorker()
    todo = [("attention", {}, "forward"), ("attention", {"x": 1}, "forward")]
    rounds = mirrored.MirroredRounds([w], todo, [(mirrored.Side(w, 0), mirrored.Side(w, 1))], block_s=0.01)
    rounds.start()
    for r in range(4):
        rounds.round(r)
    assert w.blocks[:8] == [0, 1, 1, 0, 1, 0, 0, 1]
    assert rounds.calls == [round(0.01 / 0.004)]  # sized from the slower side
    est = rounds.estimates()[0]
    assert est.ratio == pytest.approx(2.0) and est.rounds == 4


def test_a_new_session_warms_a_slow_case_with_one_call_and_a_cheap_one_as_the_first_probe_did():
    seconds = [0.002, 0.004, 0.05, 0.1]  # a cheap pair (12 calls a block) and a slow one (one call)

    class Warmed(OneWorker):
        warms: dict[int, int] = {}

        def ask(self, request, timeout=None):
            if "warm" in request:
                self.warms[request["warm"]] = request["calls"]
            return {"seconds": seconds[case_of(request)]}

    w = Warmed()
    todo = [("attention", {"x": i}, "forward") for i in range(4)]
    rounds = mirrored.MirroredRounds([w], todo, [(mirrored.Side(w, 0), mirrored.Side(w, 1)),
                                                 (mirrored.Side(w, 2), mirrored.Side(w, 3))],
                                     block_s=0.05, session_rounds=1)
    rounds.start()
    assert rounds.calls == [12, 1] and not w.warms  # the first session probes
    rounds.round(0)
    rounds.round(1)  # a new session
    assert w.warms == {0: mirrored.WARM_CALLS, 1: mirrored.WARM_CALLS, 2: 1, 3: 1}


@pytest.mark.slow
def test_the_command_times_the_pairs_and_saves_a_record_the_docs_render(tmp_path):
    record = tmp_path / "pairs.json"
    done = subprocess.run([sys.executable, "-m", "attention_bench", "pairs", "--grid", "quick", "--kind", "c1",
                           "--device", "cpu", "--budget", "3", "--record", str(record), "--no-progress"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    saved = json.loads(record.read_text())
    assert saved["kind"] == "pairs" and len(saved["pairs"]) == len(pairs.pairs_of("c1", "quick", "cpu"))
    assert envelope.problem(saved) is None and saved["regime"]["threads"] >= 1  # the one envelope, the workers' regime
    for p in saved["pairs"]:
        assert p["status"] == "ok" and p["low"] <= p["ratio"] <= p["high"] and p["rounds"] == saved["rounds"]
        assert len(p["round_ratios"]) == p["rounds"] and p["a_s"] > 0 and p["b_s"] > 0
        assert len(p["round_others_cpu_share"]) == p["rounds"]  # each round's share of the cores others used
        assert all(0 <= s <= 1 for s in p["round_others_cpu_share"])
    assert all(p["separate_workers"] for p in saved["pairs"])  # C1's two models each in a worker of its own
    block = measured.markdown(saved, str(record))
    assert block.count("| Transformer speed-up") == len(saved["pairs"])
    assert "in mirrored blocks, each side in a process of its own, " in block


def test_the_page_and_the_docs_say_where_each_ratios_two_sides_ran():
    from reports.analyses import paired

    c1 = pair("c1", {"preset": "tiny", "seq_len": 64, "batch": 8, "device": "cpu"}, 3.8, 3.6, 4.1)
    heads = pair("heads", {"strategy": "batched", "out_proj": True, "device": "cpu"}, 2.2, 2.1, 2.3)
    apart = [{**c1, "separate_workers": True}, {**heads, "separate_workers": True}]
    said = {"apart": "each side in a process of its own (as a user runs one model), over",
            "mixed": "each side in a process of its own (c1: as a user runs one model; heads: both in one), over",
            "together": "mirrored blocks, both in one process, over"}
    for name, rows in {"apart": apart, "mixed": [apart[0], heads], "together": [c1, heads]}.items():
        assert said[name] in paired.analyse([record(rows)]).verdict
    assert measured._sides_in(record(apart)) == ", each side in a process of its own"
    assert measured._sides_in(record([apart[0], heads])) == ", each side in a process of its own (heads: both in one)"
    assert measured._sides_in(record([c1, heads])) == " in one process"


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    def run(*args):
        return in_process(capsys, "pairs", *args, "--record", str(tmp_path / "r.json"))

    code, err = run("--kind", "c9")
    assert code == 2 and "invalid choice: 'c9'" in err
    code, err = run("--budget", "0")
    assert code == 2 and "finite number of seconds > 0" in err
    if not torch.cuda.is_available():
        code, err = run("--device", "cuda")
        assert code == 2 and "cuda" in err and not (tmp_path / "r.json").exists()


def test_the_paired_analysis_names_the_winner_only_outside_parity():
    from reports.analyses import paired

    a = paired.analyse([record([
        pair("c1", {"preset": "tiny", "seq_len": 64, "batch": 8, "device": "cpu"}, 3.8, 3.6, 4.1),
        pair("c1", {"preset": "paper-base", "seq_len": 16, "batch": 8, "device": "cpu"}, 1.02, 0.97, 1.06),
        pair("c1", {"preset": "paper-base", "seq_len": 64, "batch": 8, "device": "cpu"}, 0.72, 0.70, 0.74),
        pair("heads", {"strategy": "batched", "out_proj": True, "device": "cpu"}, 2.2, 2.1, 2.3)])])
    assert "tiny n = 64: the Transformer faster" in a.verdict
    assert "paper-base n = 16: parity" in a.verdict and "paper-base n = 64: the RNN faster" in a.verdict
    assert "RNN/Transformer time 0.72× (0.70-0.74) at paper-base n = 64" in a.answer
    assert "64 heads cost 2.20×" in a.answer
    assert a.numbers["heads_batched_cpu"] == 2.2 and len(a.tables["paired_ratios"]) == 4
    empty = paired.analyse([])
    assert empty.missing and "attention-bench pairs --out" in empty.verdict


def test_a_pairs_record_that_is_not_right_is_named_and_left_out(tmp_path, capsys):
    from benchmarks.core.records import write_json_atomic
    from reports import tidy

    write_json_atomic(str(tmp_path / "machine.json"), {"machine": {"hostname": "box"}, "gemm_peaks": {}})
    good = record([pair("heads", {"strategy": "sdpa", "out_proj": True, "device": "cpu"}, 2.0, 1.9, 2.1)])
    write_json_atomic(str(tmp_path / "pairs-cpu.json"), good)
    write_json_atomic(str(tmp_path / "pairs-cuda.json"),
                      record([pair("heads", {"strategy": "sdpa", "device": "cuda"}, 2.5, 1.9, 2.1)]))
    (tmp_path / "pairs-mps.json").write_text('{"kind": "pai')
    got = tidy.load_pairs([str(tmp_path)])
    assert [r["device"] for r in got] == ["cpu"] and got[0]["machine"] == "box"
    said = capsys.readouterr().err
    assert "pairs-cuda.json: pair heads" in said and "outside its interval" in said and "pairs-mps.json" in said


def test_ctrl_c_keeps_the_ratios_measured_so_far_in_the_record_exit_130(tmp_path, monkeypatch, capsys):
    class Interrupted(OneWorker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args)

        def ask(self, request, timeout=None):
            if "case" in request and len(self.blocks) >= 2 * 2 * len(pairs.pairs_of("c1", "quick", "cpu")):
                raise KeyboardInterrupt  # at the third round (2 blocks per pair a round in each side's worker)
            return super().ask(request, timeout)

    monkeypatch.setattr(pairs, "Worker", Interrupted)
    record = tmp_path / "pairs.json"
    assert attention_bench(["pairs", "--grid", "quick", "--kind", "c1", "--record", str(record), "--device", "cpu",
                            "--no-progress"]) == 130
    saved = json.loads(record.read_text())
    assert saved["stopped"] == "interrupted" and saved["rounds"] == 2  # two whole rounds before it
    assert {p["status"] for p in saved["pairs"]} == {"ok"} and all(p["rounds"] == 2 for p in saved["pairs"])
    said = capsys.readouterr()
    assert "interrupted; the ratios measured so far are saved" in said.err and "c1:" in said.out


def test_gate_sensitivity_refuses_zero_trials_and_a_foreign_record(tmp_path, capsys):
    from scripts import gate_sensitivity

    def run(*args):
        with pytest.raises(SystemExit) as done:
            gate_sensitivity.main(list(args))
        return done.value.code, capsys.readouterr().err

    code, err = run("--trials", "0")
    assert code == 2 and "--trials: must be a whole number >= 1, got '0'" in err
    other = tmp_path / "machine.json"
    other.write_text(json.dumps({"machine": {}, "gemm_peaks": {}}))
    code, err = run("--record", str(other))
    assert code == 2 and "not a record of kind 'gate-sensitivity'" in err
    assert json.loads(other.read_text()) == {"machine": {}, "gemm_peaks": {}}


@pytest.mark.slow
def test_the_pairs_worker_runs_in_the_regime_the_grid_runner_runs_in(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS")  # every runtime default, as users start both (conftest sets one thread)
    fresh = subprocess.run([sys.executable, "-c", "import json; from benchmarks.core import records; "
                            "print(json.dumps(records.regime()))"], capture_output=True, text=True, cwd=ROOT)
    runner_regime = json.loads(fresh.stdout)
    worker = workers.Worker("cases", ROOT, ROOT)  # as benchmarks.pairs starts it (no --fixed-allocator)
    try:
        worker.start([])
    finally:
        worker.stop()
    assert worker.regime == runner_regime and "OMP_WAIT_POLICY" not in worker.regime["env"]


def test_the_page_says_whether_the_pairs_ran_in_the_grids_regime():
    from reports.analyses.paired import regime_said

    same = {"threads": 2, "env": {}}
    assert regime_said([{"regime": same, "run_regime": same}]) == "worker in the grid's regime (every runtime default)"
    other = regime_said([{"regime": {"threads": 2, "env": {"OMP_WAIT_POLICY": "PASSIVE"}}, "run_regime": same}])
    assert other.startswith("worker in another regime than the grid's: OMP_WAIT_POLICY=PASSIVE, 2 threads")
    assert regime_said([{"worker_env": {"OMP_WAIT_POLICY": "PASSIVE"}}]) == "worker run with OMP_WAIT_POLICY=PASSIVE"


def test_one_answer_per_ratio_the_paired_figure_with_the_grids_checked_against_it():
    import pandas as pd

    from reports.analyses.base import Analysis
    from reports.analyses.paired import reconcile

    c1 = Analysis("c1_length", "C1", "C1", "", answer="grid's")
    c1.tables["factors"] = pd.DataFrame([
        {"device": "cpu", "preset": "tiny", "seq_len": 128, "speedup": 4.99, "speedup_low": 4.8, "speedup_high": 5.2},
        {"device": "cpu", "preset": "paper-base", "seq_len": 128, "speedup": 0.62, "speedup_low": 0.55,
         "speedup_high": 0.7},
        {"device": "cpu", "preset": "tiny", "seq_len": 16, "speedup": 2.0, "speedup_low": 1.9, "speedup_high": 2.1}])
    heads = Analysis("c3_heads", "C3", "C3/C4", "", answer="grid's",
                     numbers={"matmul_flops_max_over_min": 1.0, "time_ratio_h64_over_h1_batched": 4.83,
                              "time_ratio_h64_over_h1_sdpa": 2.75})
    paired = Analysis("paired", "P", "C1/C3", "", answer="paired's")
    pair = lambda kind, ratio, low, high, **params: {"kind": kind, "params": params, "status": "ok", "ratio": ratio,  # noqa: E731
                                                     "low": low, "high": high, "rounds": 30, "a_s": 1.0, "b_s": ratio}
    records = [{"device": "cpu", "pairs": [
        pair("c1", 5.1, 4.9, 5.3, preset="tiny", seq_len=128), pair("c1", 1.06, 0.89, 1.30, preset="paper-base",
                                                                    seq_len=128),
        pair("heads", 4.7, 4.5, 4.9, strategy="batched"), pair("heads", 2.7, 2.6, 2.8, strategy="sdpa")]}]
    reconcile(c1, heads, paired, records)
    assert "tiny n = 128: 5.10× (paired, 95% 4.90-5.30);" in c1.answer and "4.99" not in c1.answer
    assert ("paper-base n = 128: 1.06× (paired, 95% 0.89-1.30), but the grid gave 0.62× "
            "(0.55×-0.70×), apart from it") in c1.answer
    assert "4.70× (batched, paired, 95% 4.50-4.90)" in heads.answer and "2.70× (sdpa, paired" in heads.answer
    assert "4.83" not in heads.answer  # inside the interval: one figure, the paired one
    assert paired.answer.endswith("agree within them for 3 of 4 (not for C1 paper-base n = 128).")
    assert "×" not in paired.answer  # no ratio of its own: each figure in one row


def test_a_budget_spent_before_two_rounds_still_gives_every_ratio_its_interval():
    class Slow(OneWorker):
        def ask(self, request, timeout=None):
            return {"seconds": 0.01} if "probe" in request else super().ask(request, timeout)

    w = Slow()
    todo = [("attention", {}, "forward"), ("attention", {"x": 1}, "forward")]
    rounds = mirrored.MirroredRounds([w], todo, [(mirrored.Side(w, 0), mirrored.Side(w, 1))], block_s=0.01)
    rounds.start()
    measured = rounds.run(lambda e: False, budget=1e-9, min_rounds=18, max_rounds=100)  # spent at once: a busy box
    assert measured == mirrored.FEWEST_ROUNDS and rounds.estimates()[0].low > 0  # an interval, not (0, inf)


def test_the_pairs_time_three_sessions_whatever_the_budget(tmp_path, monkeypatch):
    class Counted(OneWorker):
        started = 0

        def __init__(self, *args, **kwargs):
            super().__init__(*args)

        def start(self, todo):
            Counted.started += 1  # a session: the worker started afresh
            return super().start(todo)

    monkeypatch.setattr(pairs, "Worker", Counted)
    record = tmp_path / "pairs.json"
    assert attention_bench(["pairs", "--grid", "quick", "--kind", "c1", "--record", str(record), "--device", "cpu",
                            "--budget", "0.000001", "--no-progress"]) == 0
    saved = json.loads(record.read_text())
    # three sessions (not the two a spent gate stops at), each starting both sides' workers
    assert saved["rounds"] == pairs.MIN_ROUNDS == 3 and Counted.started == 2 * 3
    assert all(p["rounds"] == 3 and p["low"] <= p["ratio"] <= p["high"] for p in saved["pairs"])


def test_c2s_pairs_take_more_sessions_the_later_ones_starting_c2s_worker_alone(tmp_path, monkeypatch):
    class Counted(OneWorker):
        starts: list[str] = []

        def __init__(self, *args, **kwargs):
            super().__init__(*args)

        def start(self, todo):
            Counted.starts.append(self.label)  # a session of this worker
            return super().start(todo)

    monkeypatch.setattr(pairs, "Worker", Counted)
    record = tmp_path / "pairs.json"
    assert attention_bench(["pairs", "--grid", "quick", "--kind", "c1", "--kind", "c2", "--record", str(record),
                            "--device", "cpu", "--budget", "0.000001", "--no-progress"]) == 0
    saved = json.loads(record.read_text())
    assert {p["kind"]: p["rounds"] for p in saved["pairs"]} == {"c1": pairs.MIN_ROUNDS, "c2": pairs.C2_ROUNDS}
    assert pairs.C2_ROUNDS > pairs.MIN_ROUNDS and saved["rounds"] == pairs.C2_ROUNDS
    # three sessions of every worker (c1's two sides each their own), the order alternating; then C2's worker alone
    c1 = ["c1 transformer", "c1 rnn-width"]
    assert Counted.starts == [*c1, "c2", "c2", *c1[::-1], *c1, "c2"] + ["c2"] * (pairs.C2_ROUNDS - pairs.MIN_ROUNDS)
    c2 = [p for p in saved["pairs"] if p["kind"] == "c2"]
    assert all(p["fraction_low"] <= p["fraction"] <= p["fraction_high"] and len(set(p["sessions"])) == pairs.C2_ROUNDS
               for p in c2)


def test_the_main_jobs_pairs_are_those_of_the_cases_it_was_asked_for(tmp_path, monkeypatch):
    """run --area models --param seq_len=16 times the c1 pair at n = 16 only: no other length, no heads, no C2."""
    import argparse

    from attention_bench import measuring
    from benchmarks.core.running import runner

    monkeypatch.setattr(pairs, "Worker", OneWorker)
    args = argparse.Namespace(grid="quick", pairs_budget=0.000001, no_progress=True)
    todo = runner.plan("quick", ["models"], ["cpu"], ["seq_len=16"])
    measuring.Paired(args, str(tmp_path), todo).rest()
    saved = json.loads((tmp_path / pairs.RECORD.format(device="cpu")).read_text())
    assert [(p["kind"], p["params"]["seq_len"]) for p in saved["pairs"]] == [("c1", 16)]
    assert len(pairs.pairs_of("c1", "quick", "cpu")) > 1 and pairs.pairs_of("heads", "quick", "cpu")  # left out
    (tmp_path / "attention").mkdir()
    measuring.Paired(args, str(tmp_path / "attention"), runner.plan("quick", ["attention"], ["cpu"])).rest()
    saved = json.loads((tmp_path / "attention" / pairs.RECORD.format(device="cpu")).read_text())  # and the GEMM
    assert {p["kind"] for p in saved["pairs"]} == {"c2"} and len(saved["pairs"]) == len(pairs.pairs_of(
        "c2", "quick", "cpu"))



def test_the_main_jobs_sessions_between_rounds_are_saved_as_each_ends_and_a_ctrl_c_keeps_them(tmp_path, monkeypatch):
    """``measuring.Paired.one`` (a session after a grid round) writes the record as it ends, saying more sessions are
    to come; a Ctrl-C in the next keeps what was timed and says so; ``rest`` after three times only what the budget
    and C2 still ask for, and the record then says nothing is to come."""
    import argparse

    from attention_bench import measuring
    from benchmarks.core.running import runner

    class Stopped(OneWorker):
        rounds_left = [None]

        def ask(self, request, timeout=None):
            if "case" in request and self.rounds_left[0] == 0:
                raise KeyboardInterrupt
            return super().ask(request, timeout)

    monkeypatch.setattr(pairs, "Worker", Stopped)
    args = argparse.Namespace(grid="quick", pairs_budget=0.000001, no_progress=True)
    todo = runner.plan("quick", ["models"], ["cpu"], ["seq_len=16"])
    paired = measuring.Paired(args, str(tmp_path / "a"), todo)
    os.makedirs(tmp_path / "a")
    for _ in range(2):
        paired.one()
    saved = json.loads((tmp_path / "a" / pairs.RECORD.format(device="cpu")).read_text())
    assert saved["stopped"] == "more sessions after the grid's rounds" and saved["rounds"] == 2
    assert len(saved["session_started_at"]) == 2 and saved["pairs"][0]["status"] == "ok"
    assert saved["pairs"][0]["sessions"] == [0, 1] and paired.seconds > 0
    Stopped.rounds_left[0] = 0
    with pytest.raises(KeyboardInterrupt):
        paired.one()
    saved = json.loads((tmp_path / "a" / pairs.RECORD.format(device="cpu")).read_text())
    assert saved["stopped"] == "interrupted" and saved["pairs"][0]["sessions"] == [0, 1]
    # stopped in the second session: the first one's ratios stay in the record, without an interval
    paired = measuring.Paired(args, str(tmp_path / "c"), todo)
    os.makedirs(tmp_path / "c")
    Stopped.rounds_left[0] = None
    paired.one()
    Stopped.rounds_left[0] = 0
    with pytest.raises(KeyboardInterrupt):
        paired.one()
    row = json.loads((tmp_path / "c" / pairs.RECORD.format(device="cpu")).read_text())["pairs"][0]
    assert row["status"] == "skipped" and row["sessions"] == [0] and row["round_ratios"] == [pytest.approx(2.0)]
    # a run whose three sessions came between its rounds: the rest times no fourth (the budget is spent)
    Stopped.rounds_left[0] = None
    paired = measuring.Paired(args, str(tmp_path / "b"), todo)
    os.makedirs(tmp_path / "b")
    for _ in range(pairs.MIN_ROUNDS):
        paired.one()
    paired.rest()
    saved = json.loads((tmp_path / "b" / pairs.RECORD.format(device="cpu")).read_text())
    assert saved["stopped"] is None and saved["rounds"] == pairs.MIN_ROUNDS
    assert len(saved["session_started_at"]) == pairs.MIN_ROUNDS


def test_a_worker_that_dies_in_the_main_jobs_sessions_is_said_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    """A worker that dies, in a session between the grid's rounds or after them, stops that device's pairs with a
    warning; the main job goes on (no exception), and no later session starts."""
    import argparse

    from attention_bench import measuring
    from benchmarks.core.pairing.workers import WorkerDied
    from benchmarks.core.running import runner

    class Dies(OneWorker):
        def ask(self, request, timeout=None):
            if "case" in request:
                raise WorkerDied("cases: ended (exit code -9)")
            return super().ask(request, timeout)

    monkeypatch.setattr(pairs, "Worker", Dies)
    args = argparse.Namespace(grid="quick", pairs_budget=1.0, no_progress=True)
    todo = runner.plan("quick", ["models"], ["cpu"], ["seq_len=16"])
    for between in (True, False):
        out = tmp_path / str(between)
        out.mkdir()
        paired = measuring.Paired(args, str(out), todo)
        if between:
            paired.one()
            paired.one()  # nothing left to time: no session starts
        paired.rest()
        err = capsys.readouterr().err
        assert err.count("warning: the paired ratios on cpu stopped: cases: ended (exit code -9)") == 1, err
        assert err.count("Timing session") == (1 if between else 0) and paired.sessions == {}
