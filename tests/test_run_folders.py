"""Run folders under faults: runs kept apart and never pooled, a run without a commit kept, damaged records
named and set aside, out of memory recorded, the run summary."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
from run_helpers import MEASURE_ONLY, PLAN, ROOT, files, in_process, measure, measured_run

from attention_bench.cli import main as attention_bench
from benchmarks.core import guards, records
from benchmarks.core.hardware import machine
from benchmarks.core.running import lock, runner
from benchmarks.core.timing import measure as measure_
from reports import columns, figures, tidy
from reports.analyses import registry, runs


def test_git_failure_is_recorded_with_its_reason(monkeypatch):
    monkeypatch.setenv("GIT_DIR", "/nonexistent")  # git cannot read the checkout
    sha, why = records.git_head()
    assert sha is None and "git rev-parse HEAD failed" in why


@pytest.mark.slow
def test_a_run_without_a_commit_is_kept_and_labelled_next_to_one_with_a_commit(tmp_path, fake_peaks, monkeypatch):
    with_commit = measure(tmp_path / "with-commit")
    monkeypatch.setattr(runner, "git_head", lambda: (None, "git rev-parse HEAD failed: dubious ownership"))
    monkeypatch.setattr(runner, "commit", lambda: None)
    without = measure(tmp_path / "no-commit")  # measured later: the latest run
    t = tidy.load([with_commit, without])
    listed = runs.table(t)
    assert listed.loc[os.path.normpath(without), "commit"] == "none: git rev-parse HEAD failed: dubious ownership"
    used = runs.latest(t)
    assert set(used.run) == {os.path.normpath(without)} and (used.status == "ok").any()
    first = registry.run_all(t)[0]
    assert "no models results" not in first.missing and "as fast" in first.verdict  # not "No ... results"
    assert attention_bench(["report", with_commit, without, "--report", str(tmp_path / "r")]) == 0
    page = open(tmp_path / "r" / "index.html").read()
    assert "dubious ownership" in page and "<img" in page


def test_two_runs_of_one_machine_are_not_pooled(tmp_path, fake_peaks):
    old = measured_run(tmp_path / "quick")  # measured earlier in the session
    new = measure(tmp_path / "default", PLAN[:1])  # later, fewer cases
    t = tidy.load([old, new])
    used = runs.latest(t)
    assert set(used.run) == {os.path.normpath(new)}
    assert set(used[used.area == "models"].model.dropna()) == {"transformer"}  # nothing borrowed from the older run
    assert len(used[used.metric == "gemm_peak_flops_per_s"]) == len(t[(t.metric == "gemm_peak_flops_per_s")
                                                                      & (t.run == os.path.normpath(new))])
    page = tmp_path / "r"
    assert attention_bench(["report", old, new, "--report", str(page)]) == 0
    assert "no: an older run of this machine" in open(page / "index.html").read()


def test_the_same_folder_twice_is_read_once_and_compare_needs_two_runs(tmp_path, fake_peaks, capsys):
    run = measured_run(tmp_path / "a")
    once = tidy.load([run])
    assert len(tidy.load([run, run + "/", str(tmp_path / "." / "a")])) == len(once)
    before = files(tmp_path)
    for argv in (["compare", run, run], ["compare", run]):
        assert attention_bench(argv + ["--report", str(tmp_path / "cmp")]) == 2
        assert "compare needs two runs or more" in capsys.readouterr().err
    assert files(tmp_path) == before and not os.path.exists(tmp_path / "cmp")


# -- corrupt records, empty folders and the end-of-run summary ---------------------------

@pytest.mark.slow
def test_a_truncated_record_is_named_skipped_by_the_report_and_set_aside_and_remeasured(tmp_path, fake_peaks,
                                                                                          capsys):
    run = measure(tmp_path / "run")
    cut = sorted((tmp_path / "run" / "cases").iterdir())[0]
    whole = cut.read_text()
    cut.write_text(whole[: len(whole) // 2])
    t = tidy.load([run])  # the report reads the rest and names the bad file
    bad = t[t.status == "unreadable"]
    assert len(bad) == 1 and cut.name in bad.reason.iloc[0] and "JSONDecodeError" in bad.reason.iloc[0]
    assert bad.area.iloc[0] == "models" and bad.seq_len.iloc[0] == 16  # which case, from the file name
    assert (t.status == "ok").sum() > 0
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    assert "1 unreadable records not counted" in open(tmp_path / "r" / "index.html").read()
    capsys.readouterr()

    others = {p.name: p.read_text() for p in (tmp_path / "run" / "cases").iterdir() if p != cut}
    r = runner.Runner(run, min_run_time=0.01, name="vm")
    counts = r.run(PLAN, progress=False)  # resuming sets it aside and measures that method again, only it
    assert counts["resumed"] == 1 and counts["ok"] == 1
    assert {p.name: p.read_text() for p in (tmp_path / "run" / "cases").iterdir() if p != cut} == others
    assert records.read_json(str(cut))["status"] == "ok"
    kept = os.listdir(tmp_path / "run" / "set-aside")
    assert len(kept) == 1 and (tmp_path / "run" / "set-aside" / kept[0]).read_text() == whole[: len(whole) // 2]
    text = r.summary(counts)
    assert "set aside      1 unreadable records" in text and f"results in     {run}" in text
    assert cut.name in capsys.readouterr().err


def test_a_corrupt_machine_record_is_set_aside_by_the_runner_and_named_by_the_report(tmp_path, fake_peaks, capsys):
    run = measured_run(tmp_path / "run")
    (tmp_path / "run" / "machine.json").write_text("{")
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 2
    assert "machine.json: not a JSON record" in capsys.readouterr().err
    runner.Runner(run, min_run_time=0.01, name="vm").run(PLAN, progress=False)
    assert records.read_json(str(tmp_path / "run" / "machine.json"))["gemm_peaks"]


def test_a_folder_interrupted_after_calibration_gets_a_one_line_error(tmp_path, fake_peaks, capsys):
    r = runner.Runner(str(tmp_path / "run"), min_run_time=0.01, name="vm")
    r.calibrate([1])  # machine.json written, no case yet
    assert attention_bench(["report", str(tmp_path / "run"), "--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no case was measured (no case records)") and "Traceback" not in err


def test_the_run_summary_names_skips_failures_and_noisy_cases():
    ok = {"area": "models", "method": "forward", "params": {"seq_len": 16}, "status": "ok", "reason": None,
          "time_median_s": 1.0, "time_iqr_s": 0.5}
    skipped = {**ok, "status": "skipped", "reason": "needs a CUDA device"}
    failed = {**ok, "status": "failed", "reason": "RuntimeError: boom"}
    text = runner.summary("out", [ok, skipped, skipped, failed], {"ok": 1, "skipped": 2, "failed": 1}, [])
    assert "skipped        2: 2 × needs a CUDA device" in text and "failed         1: 1 × RuntimeError: boom" in text
    assert "noisy          1 with IQR/median > 10%: models--forward--seq_len=16 (50%)" in text
    assert "unreplicated   0 timed over fewer than 3 values" in text  # no sample count: an older record
    once = {**ok, "params": {"seq_len": 64}, "time_median_s": 0.7, "time_iqr_s": 0.0, "samples": 1}
    text = runner.summary("out", [ok, {**ok, "samples": 40}, once], {"ok": 3}, [])
    assert ("unreplicated   1 timed over fewer than 3 values, so no spread measured (--rounds R times each R times, "
            "spread over the run): models--forward--seq_len=64 (0.7 s)") in text
    # the two with a wide spread; the one-value case's spread is unknown, not wide
    assert "noisy          2 with" in text


def test_the_page_lists_cases_whose_spread_was_not_measured(tmp_path):
    from reports import html
    from reports.analyses import noise

    base = {"source": "runner", "run": "r", "machine": "m", "commit": "c", "area": "models", "method": "forward",
            "metric": "time", "unit": "s", "status": "ok", "model": "transformer", "device": "cpu"}
    base["date"] = "2026-12-04T08:00:00+00:00"
    t = columns.frame([{**base, "seq_len": 16, "value": 0.2, "q25": 0.19, "q75": 0.21, "iqr": 0.02, "samples": 9},
                     {**base, "seq_len": 64, "value": 0.7, "q25": 0.7, "q75": 0.7, "iqr": 0.0, "samples": 1},
                     {**base, "seq_len": 32, "value": 0.4, "q25": 0.4, "q75": 0.4, "iqr": 0.0}])
    thin = noise.unreplicated_cases(t)
    assert thin.seq_len.tolist() == [64] and thin.samples.tolist() == [1]  # unknown counts are not guessed
    page = open(html.build(t, str(tmp_path / "report"))).read()
    assert "Unreplicated cases: timed over fewer than 3 values" in page
    assert "<summary>1 unreplicated case</summary>" in page


# -- out of memory: one rule for the runner and asv -----------------------------------------

def test_a_cpu_out_of_memory_under_asv_is_recorded_as_out_of_memory(tmp_path, monkeypatch):
    from test_tidy import write_asv_results

    from benchmarks import bench_multihead, cases

    (tmp_path / "asv.conf.json").write_text('{"version": 1, "results_dir": ".asv/results"}')
    monkeypatch.setenv("ASV_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("ASV_ENV_NAME", "virtualenv-py3.11-torch2.13.0")

    def build(**values):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 68719476736 bytes")

    area = dataclasses.replace(bench_multihead.AREA, build=build, keep={})
    monkeypatch.setattr(bench_multihead.MultiHeadAttention, "AREA", area)
    bench = bench_multihead.MultiHeadAttention()
    with pytest.raises(cases.Skip, match="out of memory: .*can't allocate memory"):
        bench.setup({}, 1, "batched", True, "cuda")  # asv then records a skip: no value
    root = str(tmp_path / ".asv" / "results")
    write_asv_results(root)  # its (h 1, batched, W_O, cuda) case has no value, as asv stores a skip
    t = tidy.load([root])
    row = t[(t.metric == "time") & (t.heads == 1) & (t.device == "cuda")].iloc[0]
    assert row.status == "oom" and "can't allocate memory" in row.reason
    assert t[(t.metric == "time") & (t.heads == 8) & (t.device == "cuda")].status.iloc[0] == "skipped"


def test_a_cpu_out_of_memory_in_the_runner_is_recorded_and_the_run_goes_on(tmp_path, fake_peaks, monkeypatch):
    from benchmarks import cases

    real = cases.build

    def build(area, params):
        if params["model"] == "transformer":
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        return real(area, params)

    monkeypatch.setattr(cases, "build", build)
    r = runner.Runner(str(tmp_path / "run"), min_run_time=0.01, name="vm")
    counts = r.run(PLAN, progress=False)
    assert counts["oom"] == 3 and counts["ok"] == 3  # the RNN case still measured
    assert "out of memory  3: 3 × DefaultCPUAllocator: can't allocate memory" in r.summary(counts)


def test_the_page_shows_where_memory_ran_out(tmp_path, fake_peaks):
    run = measured_run(tmp_path / "run")
    oom = {"area": "models", "method": "forward", "status": "oom",
           "reason": "DefaultCPUAllocator: can't allocate memory",
           "params": {**PLAN[0][1], "seq_len": 4096}, "commit": records.commit(), "started_at": None}
    name = records.case_key("models", "forward", oom["params"]) + ".json"
    records.write_json_atomic(str(tmp_path / "run" / "cases" / name), oom)
    limits = runs.memory_limits(tidy.load([run]))
    assert list(limits.seq_len) == [4096] and list(limits.largest_n_measured) == [16]
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    assert "Where memory ran out" in open(tmp_path / "r" / "index.html").read()


# -- one writer per run folder, and a run cut short by Ctrl-C ---------------------------------------------------

HOLD = ("import sys, time\nfrom benchmarks.core.running.lock import FolderLock\n"
        "held = FolderLock(sys.argv[1]).acquire()\n"
        "print('held', flush=True)\ntime.sleep(60)\n")


@pytest.mark.parametrize("command", [MEASURE_ONLY, ("run",)])
def test_a_second_writer_is_refused_naming_the_folder_and_its_holder(tmp_path, fake_peaks, capsys, command):
    run = measured_run(tmp_path / "run", PLAN[:1])
    before = files(run)
    with lock.FolderLock(run):  # the OS lock conflicts across open files, so a holder in this process will do
        code, err = in_process(capsys, *command, "--grid", "quick", "--device", "cpu", "--out", run, "--no-progress",
                               "--report", str(tmp_path / "report"))
    assert code == 2
    assert f"{run} is being written by pid {os.getpid()} on " in err and "one writer per run folder" in err
    assert {k: v for k, v in files(run).items() if not k.startswith(".lock")} == before  # nothing measured
    assert not os.path.exists(tmp_path / "report" / "index.html")  # no report written


@pytest.mark.slow
def test_a_writer_in_another_process_holds_the_folder(tmp_path, capsys):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(lock.FolderBusy, match=f"{tmp_path} is being written by pid {holder.pid} on "):
            lock.FolderLock(str(tmp_path)).acquire()
    finally:
        holder.kill()
        holder.wait()
    with lock.FolderLock(str(tmp_path)):  # its process gone, the OS released the lock
        pass
    assert f"took over {tmp_path} from pid {holder.pid}" in capsys.readouterr().err


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_warning(tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    records.write_json_atomic(str(tmp_path / lock.OWNER), {"pid": pid, "host": socket.gethostname(),
                                                           "command": "python -m reports", "started": "earlier"})
    with lock.FolderLock(str(tmp_path)):
        assert json.loads((tmp_path / lock.OWNER).read_text())["pid"] == os.getpid()
    err = capsys.readouterr().err
    assert f"took over {tmp_path} from pid {pid} on {socket.gethostname()} (python -m reports" in err
    assert not (tmp_path / lock.OWNER).exists()  # released cleanly: nothing to take over next time
    with lock.FolderLock(str(tmp_path)):
        pass
    assert "took over" not in capsys.readouterr().err


def test_ctrl_c_prints_the_summary_so_far_exits_130_and_releases_the_folder(tmp_path, fake_peaks, capsys,
                                                                           monkeypatch):
    real, calls = measure_.measure, []

    def interrupted(case, method, **kw):
        calls.append(method)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(case, method, **kw)

    monkeypatch.setattr(measure_, "measure", interrupted)
    out = tmp_path / "run"
    code, err = in_process(capsys, *MEASURE_ONLY, "--grid", "quick",
                           "--area", "multihead", "--device", "cpu", "--out", str(out),
                           "--no-progress", "--rounds", "1")  # in this process
    assert code == 130 and "Traceback" not in err
    assert "interrupted: every record written so far is whole" in err and "run the same command again" in err
    assert "Run summary" in err and "measured       1" in err
    with lock.FolderLock(str(out)):  # released: the next run can start
        pass


def test_a_truncated_profile_is_named_and_left_out_and_the_report_is_built(tmp_path, fake_peaks, capsys):
    run = measured_run(tmp_path / "run", PLAN[:1])
    cut = tmp_path / "run" / "profiles" / "models--forward--cut" / "profile.json"
    cut.parent.mkdir(parents=True)
    cut.write_text('{"area": "models", "components": [')
    assert attention_bench(["report", run, "--report", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert f"{cut}: not a JSON record" in err and "this profile is left out" in err
    assert (tmp_path / "r" / "index.html").exists()


def test_a_report_rebuilt_on_a_disk_that_fills_leaves_the_previous_one_byte_for_byte(tmp_path, fake_peaks, capsys,
                                                                                     monkeypatch):
    run = measured_run(tmp_path / "run", PLAN[:1])
    report = tmp_path / "report"
    assert attention_bench(["report", run, "--report", str(report)]) == 0
    before = files(report)
    real, saved = figures.save, []

    def fills(figs, folder):
        if saved:
            raise OSError(errno.ENOSPC, "No space left on device")
        saved.append(folder)
        return real(figs, folder)

    monkeypatch.setattr(figures, "save", fills)
    assert attention_bench(["report", run, "--report", str(report)]) == 2
    err = capsys.readouterr().err
    assert f"could not write the report into {str(report)!r} (No space left on device)" in err
    assert "the report that was there is left as it was" in err and "Traceback" not in err
    assert files(report) == before
    assert sorted(os.listdir(tmp_path)) == ["report", "run"]  # no partial folder left beside it


def test_another_machine_into_an_existing_run_folder_is_refused(tmp_path, fake_peaks, capsys):
    run = measure(tmp_path / "run", PLAN[:1], name="M1")
    before = files(run)
    code, err = in_process(capsys, *MEASURE_ONLY, "--grid", "quick",
                           "--area", "models", "--device", "cpu", "--out", run,
                           "--machine", "M2", "--no-progress")
    assert code == 2 and f"{run} holds a run of machine 'M1', not 'M2': one machine per run folder" in err
    assert files(run) == before


@pytest.mark.parametrize("other", ["commit", "rounds"])
def test_a_run_of_another_commit_or_rounds_count_is_moved_aside_whole_in_one_line(tmp_path, fake_peaks, capsys,
                                                                                   monkeypatch, other):
    run = measured_run(tmp_path / "run", PLAN[:1])
    before = files(run)
    if other == "commit":
        monkeypatch.setattr(runner, "commit", lambda: "e" * 40)
    # its rounds in this process: what is moved aside does not depend on where the rounds ran
    monkeypatch.setattr(runner.Runner, "in_processes", property(lambda self: False))
    code, err = in_process(capsys, *MEASURE_ONLY, "--grid", "quick",
                           "--area", "models", "--device", "cpu", "--out", run,
                           "--no-progress", "--min-run-time", "0.01", "--rounds", "2" if other == "rounds" else "1")
    assert code == 0, err
    earlier = os.path.join(run, "earlier", f"{records.short(records.commit())}-1r")
    note = [line for line in err.splitlines() if line.startswith("note:")]
    sha = records.short(records.commit())
    assert len(note) == 1 and f"moved 3 records of commit {sha} in 1 round to {earlier}" in note[0]
    # the earlier run, whole, in a folder of its own that the report reads; this folder holds only the new run
    assert files(earlier) == {k: v for k, v in before.items() if k.startswith("cases") or k == "machine.json"}
    assert set(tidy.load([earlier]).commit.dropna()) == {records.commit()}
    now = tidy.load([run])
    assert set(now.commit.dropna()) == {runner.commit()} and (now[now.metric == "time"].status == "ok").all()
    assert set(now[now.metric == "time"].rounds.dropna()) == {2 if other == "rounds" else 1}


def test_a_disk_too_full_for_the_run_is_one_line_before_calibration(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(guards.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    monkeypatch.setattr(machine, "calibrate", lambda threads=(), fresh=False: pytest.fail("calibrated on a full disk"))
    code, err = in_process(capsys, *MEASURE_ONLY, "--grid", "quick",
                           "--area", "models", "--out", str(out), "--no-progress")
    assert code == 2 and "Traceback" not in err
    assert f"--out {str(out)!r}: 1000 bytes free on its disk, and this run needs about " in err
    assert "free some space or give another --out" in err and not (out / "machine.json").exists()


def test_a_disk_that_fills_mid_run_ends_in_one_line_and_the_summary(tmp_path, fake_peaks, capsys, monkeypatch):
    real, written = runner.write_json_atomic, []

    def fills(path, data):
        if len(written) == 3:  # machine.json and two records written, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(path)
        real(path, data)

    monkeypatch.setattr(runner, "write_json_atomic", fills)
    out = tmp_path / "run"
    code, err = in_process(capsys, *MEASURE_ONLY, "--grid", "quick",
                           "--area", "multihead", "--device", "cpu", "--out", str(out),
                           "--no-progress", "--min-run-time", "0.01", "--rounds", "1")
    assert code == 2 and "Traceback" not in err
    assert f"error: could not write in {out} (No space left on device): every record written before is whole" in err
    assert "Run summary" in err and "measured       2" in err
    assert all(records.problem(records.read_json(p)) is None for p in written[1:])


def test_an_earlier_run_moved_aside_never_overwrites_one_moved_before(tmp_path, fake_peaks):
    from benchmarks.core import pipeline

    run, sha = str(tmp_path / "run"), records.commit()
    for _ in range(2):  # a 1-round run, then a 2-round run into the folder; twice
        measure(run, PLAN[:1])
        assert "moved 3 records" in pipeline.one_run(run, sha, 2)
    first, second = (os.path.join(run, "earlier", f"{records.short(sha)}-1r{suffix}") for suffix in ("", "-2"))
    assert len(os.listdir(os.path.join(first, "cases"))) == len(os.listdir(os.path.join(second, "cases"))) == 3
    assert pipeline.one_run(run, sha, 2) is None and not os.listdir(os.path.join(run, "cases"))
