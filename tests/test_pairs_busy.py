"""The share of the cores other processes used while each pair's round ran (benchmarks.core.pairing.mirrored,
benchmarks.core.hardware.machine): the workers' own CPU time is the measurement's, another process's is named,
round by round, in the record, the command's table, the docs and the page."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from run_helpers import StandInWorker, quiet_machine
from run_helpers import paired_row as pair
from run_helpers import pairs_record as record

from benchmarks import gate, pairs
from benchmarks.core.hardware import machine
from benchmarks.core.pairing import mirrored
from reports import measured
from reports.analyses import paired

LINUX = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="CPU counters are read from Linux's /proc")
#: a child that uses 0.3 s of CPU, says so, then waits to be ended
BURN = ("import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
        "print('done', flush=True)\ntime.sleep(60)")


@LINUX
def test_a_processes_cpu_seconds_count_as_the_readings_own_while_it_runs_and_nothing_once_it_ended():
    child = subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"  # however busy the machine: 0.3 s of its own CPU
        used = machine.process_cpu_s(child.pid)
        assert 0.3 <= used < 5
        mine, with_child = machine.cpu_counters(), machine.cpu_counters([child.pid])
        assert with_child[2] - mine[2] == pytest.approx(used, abs=0.05)
    finally:
        child.kill()
        child.wait()
    assert machine.process_cpu_s(child.pid) == 0.0


def test_the_share_of_others_leaves_out_the_cpu_time_of_the_processes_the_readings_named(monkeypatch):
    monkeypatch.setattr(os, "sysconf", lambda name: 100)  # clock ticks a second
    # 400 ticks over both cores, 200 of them busy; the controller and its workers used 1 s: 100 ticks of those
    assert machine.others_cpu_share((1000, 5000, 2.0), (1200, 5400, 3.0)) == pytest.approx(0.25)
    assert machine.others_cpu_share((1000, 5000, 2.0), (1200, 5400, 4.5)) == 0.0  # never below 0
    assert machine.others_cpu_share(None, (1200, 5400, 3.0)) is None


class Sleeper(StandInWorker):
    """Stands in for a worker: each block takes 30 ms of sleep; ``proc`` the process whose id it names, if any."""

    regime, settle, label = {"threads": 1, "env": {}}, 0, "cases"

    def __init__(self, proc=None):
        self.proc = proc

    def start(self, todo):
        return [None] * len(todo)

    def ask(self, request, timeout=None):
        time.sleep(0.03)
        return {"seconds": 0.03}


def _two_rounds(worker) -> mirrored.MirroredRounds:
    todo = [("attention", {}, "forward"), ("attention", {"x": 1}, "forward")]
    rounds = mirrored.MirroredRounds([worker], todo, [(mirrored.Side(worker, 0), mirrored.Side(worker, 1))],
                                     block_s=0.03)
    rounds.start()
    rounds.round(0)
    rounds.round(1)
    return rounds


def test_each_round_counts_the_workers_processes_as_its_own(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    asked = []
    monkeypatch.setattr(mirrored, "cpu_counters", lambda pids=(): asked.append(list(pids)) or (len(asked), 10, 0.0))
    try:
        rounds = _two_rounds(Sleeper(child))
    finally:
        child.kill()
        child.wait()
    assert asked == [[child.pid]] * 4  # before and after each round's blocks
    assert len(rounds.others[0]) == 2 and len(rounds.ratios[0]) == 2


@LINUX
def test_a_pair_timed_beside_busy_cores_names_each_busy_round_in_its_record_table_docs_and_page():
    cores = os.cpu_count() or 1
    with quiet_machine():  # one spinning process per core: no other test's timings beside them
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
        try:
            time.sleep(0.3)  # started
            rounds = _two_rounds(Sleeper())
        finally:
            for s in spinners:
                s.kill()
                s.wait()
    shares = rounds.others[0]
    assert len(shares) == 2 and all(s > machine.BUSY_SHARE for s in shares), shares  # the worker only slept

    row = {**pair("c1", {"preset": "tiny", "seq_len": 128, "device": "cpu"}, 4.9, 4.5, 5.3), "rounds": 2,
           "round_others_cpu_share": shares, "meaning": "Transformer speed-up", "axis": "model",
           "a": "transformer", "b": "rnn-width"}
    said = f"2 of 2 rounds timed while other processes used more than {machine.BUSY_SHARE:.0%} of the cores"
    assert said in pairs.notes(row) and said in pairs.show([row])
    saved = {**record([row]), "generated": "2026-12-07T12:00:00+00:00", "commit": "0" * 40, "elapsed_s": 3.0,
             "machine": {"cpu_model": "AMD EPYC", "cpu_count": 2, "gpu_name": None, "torch": "2.13.0+cpu"}}
    assert said in measured.markdown(saved, "pairs.json")
    a = paired.analyse([saved])
    assert "Timed on a busy machine" in a.verdict and "c1 preset tiny, seq_len 128, 2 of 2 rounds" in a.verdict
    assert a.tables["paired_ratios"].busy_rounds.tolist() == [2]


def test_a_quiet_pair_and_a_record_from_before_the_count_say_nothing_of_it():
    quiet = {**pair("heads", {"strategy": "batched", "out_proj": True, "device": "cpu"}, 4.2, 4.0, 4.4),
             "round_others_cpu_share": [0.02, None, 0.4]}
    older = pair("heads", {"strategy": "looped", "out_proj": True, "device": "cpu"}, 3.5, 3.3, 3.7)
    assert pairs.notes(quiet) == "" and pairs.notes(older) == ""
    a = paired.analyse([record([quiet, older])])
    assert "busy machine" not in a.verdict
    assert a.tables["paired_ratios"].busy_rounds.tolist()[0] == 0
    assert a.tables["paired_ratios"].busy_rounds.isna().tolist() == [False, True]


def test_the_gate_names_a_verdict_whose_rounds_ran_on_a_busy_machine():
    row = {"case": "models--forward--model=transformer", "base_s": 0.010, "head_s": 0.0115, "ratio": 1.15,
           "low": 1.1, "high": 1.2, "verdict": "slower", "round_others_cpu_share": [0.9, 0.1, 0.8, None]}
    line = gate.show([row]).splitlines()[-1]
    assert line.endswith(f"slower (2 of 3 rounds timed while other processes used more than "
                         f"{machine.BUSY_SHARE:.0%} of the cores (90%, 80%))")
    assert gate.show([{**row, "round_others_cpu_share": [0.1, 0.2]}]).endswith("slower")
