"""The command line: run (measure + report), report from results, compare, csv, and clear errors."""

import datetime as dt
import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from run_helpers import PLAN, measure

from attention_bench.cli import main
from benchmarks import cases
from benchmarks.core import records
from benchmarks.core.running import runner
from reports import ranges


@pytest.mark.slow
def test_measure_then_build_compare_and_export(tmp_path, capsys, main_job):
    run, report, code, stdout = main_job  # the main job as the README runs it (conftest)
    assert code == 0
    assert len(os.listdir(os.path.join(run, "profiles"))) == len(cases.profile_set("quick"))  # profiled too
    index = stdout.strip().splitlines()[-1]
    assert index == os.path.abspath(os.path.join(report, "index.html")) and os.path.exists(index)
    assert os.path.exists(os.path.join(report, "results.csv"))
    # every figure the report published is in its range, on an idle machine or a busy one
    saved = json.load(open(os.path.join(report, "report.json")))
    published = {(a["key"], k): v for a in saved["analyses"] for k, v in a["numbers"].items()}
    assert published and not {k: v for k, v in published.items() if ranges.why_out_of_range(k[1], v)}
    csv = pd.read_csv(os.path.join(report, "results.csv"))
    assert not [m for m, v in zip(csv.metric, csv.value, strict=True) if ranges.why_out_of_range(m, v)]

    page = open(index).read()
    assert page.count("<section") == 20 and "trace.json.gz" in page

    assert main(["csv", run, "--csv", str(tmp_path / "t.csv")]) == 0
    table = pd.read_csv(tmp_path / "t.csv")
    assert set(table.machine) == {"box"} and (table.metric == "time").any()

    assert main(["compare", run, run, "--report", str(tmp_path / "cmp")]) == 2  # one run named twice
    assert "compare needs two runs or more" in capsys.readouterr().err
    copy = str(tmp_path / "copy")
    shutil.copytree(run, copy)  # a second run of the same machine: compared side by side, not pooled
    assert main(["compare", run, copy, "--report", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert f"box [{copy}]" in out and f"box [{run}]" in out
    assert f"{copy} (box) against {run} (box), figure by figure: 0 of " in out  # a copy differs in nothing


@pytest.mark.slow
def test_the_main_job_times_each_round_in_a_fresh_process(main_job, tmp_path, fake_peaks):
    """The main job (conftest) times its grid in rounds, each in a process of its own; a second run into its folder
    finds every round there and starts no process."""
    run = main_job[0]
    timed = [r for r in (json.load(open(os.path.join(run, "cases", name))) for name in os.listdir(
        os.path.join(run, "cases"))) if r["status"] == "ok" and "rounds" in r]
    assert timed
    for rec in timed:
        pids = {x["pid"] for x in rec["rounds"]}  # more than 3 where a method of the case had two modes
        assert 3 <= len(rec["rounds"]) <= 3 + runner.EXTRA_ROUNDS and len(pids) == len(rec["rounds"])
        assert os.getpid() not in pids
        medians = [x["median_s"] for x in rec["rounds"]]
        assert rec["processes"] == len(pids) and (rec["time_low_s"], rec["time_high_s"]) == (min(medians),
                                                                                            max(medians))
    copy = str(tmp_path / "run")
    shutil.copytree(run, copy)
    plan = runner.plan("quick", devices=["cpu"])
    started = []
    again = runner.Runner(copy, min_run_time=0.01, rounds=3, fresh=True, name="box", grid="quick")  # as the command
    again.round_in_process = lambda *args: started.append(args)
    assert again.run(plan, progress=False)["resumed"] == len(plan) and started == []


@pytest.mark.slow
def test_the_main_jobs_paired_sessions_fall_between_its_rounds(main_job):
    """A session of the paired ratios after each of the grid's rounds (each started after every record of that round
    and before any of the next), so that a ratio's sessions are spread over the run as the grid's rounds are; the
    record keeps when each session started and says no more are to come."""
    run = main_job[0]
    saved = json.load(open(os.path.join(run, "pairs-cpu.json")))
    sessions = [dt.datetime.fromisoformat(t) for t in saved["session_started_at"]]
    assert len(sessions) >= 3 and saved["stopped"] is None and saved["rounds"] == len(sessions)
    rounds: dict[int, list] = {}
    for name in os.listdir(os.path.join(run, "cases")):
        for i, r in enumerate(json.load(open(os.path.join(run, "cases", name))).get("rounds") or []):
            rounds.setdefault(i, []).append(dt.datetime.fromisoformat(r["started_at"]))
    for i in range(3):
        assert max(rounds[i]) < sessions[i], i
        if i + 1 in rounds:
            assert sessions[i] < min(rounds[i + 1]), i
    ok = [p for p in saved["pairs"] if p["status"] == "ok"]
    assert ok and all(sorted(set(p["sessions"])) == list(range(len(sessions))) for p in ok)


def test_a_runs_between_hook_runs_after_each_planned_round_in_its_own_process(tmp_path):
    """``Runner.run``'s ``between`` runs once after each planned round's process, never after the extra rounds for
    cases still unsettled, nor for a run whose rounds share one process."""
    events = []
    fresh = runner.Runner(str(tmp_path / "a"), min_run_time=0.01, rounds=3, fresh=True, name="box")
    fresh.round_in_process = lambda remaining, round_, progress: events.append(f"round {round_}")
    fresh.pending = lambda area, params, round_: True  # every case unsettled: the extra rounds run too
    fresh.calibrate = lambda threads, again=False: {}
    fresh.run(PLAN, progress=False, between=lambda: events.append("between"))
    planned = ["round 1", "between", "round 2", "between", "round 3", "between"]
    assert events == planned + [f"round {3 + i}" for i in range(1, runner.EXTRA_ROUNDS + 1)]
    one = runner.Runner(str(tmp_path / "b"), min_run_time=0.01, rounds=3, fresh=False, name="box")
    one.calibrate, one._rounds, called = fresh.calibrate, lambda *args, **kwargs: None, []
    one.run(PLAN, progress=False, between=lambda: called.append(1))
    assert called == []


def test_bad_input_is_a_clear_error_and_exit_code_2(tmp_path, capsys):
    assert main(["report", str(tmp_path), "--report", str(tmp_path / "r")]) == 2
    assert "neither a runner output folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--grid", "huge"])
    assert "invalid choice: 'huge'" in capsys.readouterr().err


def test_the_claims_page_is_generated_from_the_claims_the_report_shows(capsys):
    from reports import claims

    assert main(["claims"]) == 0
    page = capsys.readouterr().out
    assert page == claims.markdown()
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "CLAIMS.md")) as f:
        assert f.read() == page, "docs/CLAIMS.md is stale: attention-bench claims > docs/CLAIMS.md"
    for c in claims.CLAIMS:
        assert c.claim in page


@pytest.mark.parametrize("page", ["README.md", "docs/MEASURED.md"])
def test_the_docs_measured_figures_are_generated_from_the_saved_runs_they_name(page):
    from reports import measured

    root = os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, page)) as f:
        blocks = measured.readme_blocks(f.read())
    kinds = set()
    for name, only, block in blocks:
        record = measured.load(os.path.join(root, name))
        flag = "".join(f" --analysis {k}" for k in only or ()) + ("" if page == measured.README else f" --for {page}")
        stale = f"{page} is stale: attention-bench measured {name}{flag}"
        assert block == measured.markdown(record, name, only, page), stale
        link = os.path.relpath(name, os.path.dirname(page) or ".")  # the block's link, from the page's folder
        assert os.path.exists(os.path.join(root, os.path.dirname(page), link))
        kinds.add(record.get("kind", "report"))
        if only == ["agreement"]:  # a compare's record: both runs, raw and normalised (and best round, in rounds)
            assert record["agreement"] and all({r["metric"] for r in a["rows"]} >= {"time", "time_normalised"}
                                               for a in record["agreement"])
        elif only == [measured.ANSWERS]:  # the answers table: every analysis with data has an answer
            assert all(a["answer"] for a in record["analyses"] if a.get("has_data", True))
        elif "analyses" in record:
            assert any(a["verdict"] and a["conditions"] for a in record["analyses"] if not only or a["key"] in only)
        elif record.get("kind") == "pairs":
            assert records.pairs_problem(record) is None
        elif record.get("kind") == "prediction":  # every case priced, every verdict labelled
            assert record["cases"] > 0 and record["predicted"] and "not measured" in record["source"]
        elif record.get("kind") == "gate-sensitivity":  # every trial of every method counted within its cases
            trials = [t for by_head in record["results"].values() for ts in by_head.values() for t in ts]
            assert trials and all(0 <= t["slower"] <= t["cases"] for t in trials)
        elif record.get("kind") == "reproducibility":  # each figure checked against every other run
            runs = len(record["runs"])
            assert runs >= 2 and all(0 <= f["outside"] <= f["pairs"] == runs * (runs - 1) for f in record["figures"])
        elif record.get("kind") == "regime":  # each setting's cases, each ratio inside its interval
            assert all(c["low"] <= c["ratio"] <= c["high"] for r in record["results"] for c in r["cases"])
        elif record.get("kind") == "history-vs-asv":  # both methods (asv where it ran) over the same cases
            ran = {"paired"} | ({"asv"} if record["asv_setting"] is not None else set())
            assert ran <= set(record["scores"]) and ("asv" in record["scores"]) == ("asv" in ran) and all(
                s["cases"] == record["cases"] and all(0 <= v <= 1 for v in s["found"].values())
                for s in record["scores"].values())
    expected = {"report", "gate-sensitivity", "history-vs-asv"} if page == measured.README else {
        "report", "regression-check", "compare-with-torch", "gate-sensitivity", "pairs", "prediction",
        "reproducibility", "regime", "history-vs-asv"}
    assert kinds == expected, kinds


def test_a_measured_block_refuses_an_unknown_analysis_or_kind():
    from reports import measured

    record = {"analyses": [{"key": "c5_softmax", "claim": "C5", "title": "t", "verdict": "v", "conditions": "c"}],
              "runs": [], "machine": {"cpu_model": "x", "cpu_count": 2, "torch": "2"}, "generated": "now"}
    not_run = {"key": "c3_parallel", "claim": "C3", "title": "p", "verdict": "No results: not run", "conditions": "",
               "has_data": False}
    block = measured.markdown({**record, "analyses": record["analyses"] + [not_run]}, "r.json")
    assert "**C5, t.** v" in block and "not run" not in block  # an area not run is left out of the docs
    assert "not run" in measured.markdown({**record, "analyses": [not_run]}, "r.json", ["c3_parallel"])
    with pytest.raises(ValueError, match="r.json: no analysis 'c9'; allowed: c5_softmax"):
        measured.markdown(record, "r.json", ["c9"])
    with pytest.raises(ValueError, match="unknown record kind 'x'; allowed: report, prediction, regression-check"):
        measured.markdown({**record, "kind": "x"}, "r.json")


def test_the_regression_check_reads_asvs_table_rows():
    import importlib.util

    root = os.path.join(os.path.dirname(__file__), "..")
    path = os.path.join(root, "scripts", "check_regression_detection.py")
    spec = importlib.util.spec_from_file_location("check", path)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    out = ("| Change | Before [a] | After [b] | Ratio | Benchmark (Parameter) |\n|---|---|---|---|---|\n"
           "| +        | 16.4±1ms    | 34.3±2ms   |    2.09 | bench_attention.X.time_forward(128, 'sdpa') |\n"
           "| -        | 2.0±0.1ms   | 1.0±0.1ms  |   ~0.50 | bench_attention.X.time_forward(512, 'math') |\n")
    rows = [check.parse_row(r) for r in check.changed_rows(out)]
    assert [(r["change"], r["before"], r["ratio"], r["benchmark"]) for r in rows] == [
        ("+", "16.4±1ms", 2.09, "bench_attention.X.time_forward(128, 'sdpa')"),
        ("-", "2.0±0.1ms", 0.5, "bench_attention.X.time_forward(512, 'math')")]


SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "scripts")
SCRIPT_NAMES = sorted(f for f in os.listdir(SCRIPTS) if f.endswith(".py") and f != "__init__.py")
COMMAND = os.path.join(os.path.dirname(sys.executable), "attention-bench")
#: the commands as a user types them from another folder, and what each prints
COMMANDS = {"run --help": ([COMMAND, "run", "--help"], "usage: attention-bench run"),
            "python -m attention_bench ranks --help": ([sys.executable, "-m", "attention_bench", "ranks", "--help"],
                                                       "usage: attention-bench ranks"),
            "claims": ([COMMAND, "claims"], "# The claims attention-bench tests")}


#: each script given, as ``python SCRIPT --help`` runs it (sys.path[0] the script's folder), one after another in
#: one interpreter: a process of its own each would import torch again, about 2 CPU-s a script. The project's
#: packages are forgotten between scripts, so that each finds them itself. Prints {script: [exit code, out, err]}
HELP_EACH = r"""
import contextlib, io, json, os, runpy, sys, traceback
rest, before, done = list(sys.path[1:]), set(sys.modules), {}
for script in sys.argv[1:]:
    sys.argv, sys.path[:] = [script, "--help"], [os.path.dirname(script), *rest]
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        except BaseException:
            code = 1
            traceback.print_exc()
    done[script] = [code, out.getvalue(), err.getvalue()]
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("attention_bench", "benchmarks", "reports", "transformer", "scripts"):
            del sys.modules[name]
print(json.dumps(done))
"""


@pytest.fixture(scope="module")
def from_elsewhere(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every script's ``--help`` (HELP_EACH) and each of COMMANDS, run from a folder outside the checkout, all
    started at once."""
    cwd = tmp_path_factory.mktemp("elsewhere")
    scripts = {os.path.abspath(os.path.join(SCRIPTS, name)): name for name in SCRIPT_NAMES}
    argv = {name: command for name, (command, _) in COMMANDS.items()}
    argv[""] = [sys.executable, "-c", HELP_EACH, *scripts]
    started = {name: subprocess.Popen(a, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name, a in argv.items()}
    done = {}
    for name, proc in started.items():
        out, err = proc.communicate(timeout=300)
        done[name] = subprocess.CompletedProcess(argv[name], proc.returncode, out, err)
    each = done.pop("")  # a runner that failed itself fails every script, with its error
    results = (json.loads(each.stdout) if each.returncode == 0 else
               {path: [each.returncode, "", each.stderr] for path in scripts})
    return done | {scripts[path]: subprocess.CompletedProcess([sys.executable, path, "--help"], code, out, err)
                   for path, (code, out, err) in results.items()}


@pytest.mark.parametrize("script", SCRIPT_NAMES)
@pytest.mark.slow
def test_every_script_runs_as_the_readme_shows_it_from_any_folder(from_elsewhere, script):
    """``.venv/bin/python scripts/X.py``: the script finds its own checkout's packages, whatever the current
    folder."""
    done = from_elsewhere[script]
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr


@pytest.mark.slow
def test_the_commands_run_from_any_folder(from_elsewhere):
    """``cd anywhere && <repo>/.venv/bin/attention-bench`` (or ``python -m attention_bench``, as torchrun starts
    it): the packages are installed (scripts/setup.sh), not found through the current folder."""
    for name, (_, says) in COMMANDS.items():
        done = from_elsewhere[name]
        assert done.returncode == 0 and says in done.stdout, (name, done.stderr[-2000:])


@pytest.mark.slow
def test_the_asv_duration_estimate_reads_a_real_runner_folder(tmp_path, fake_peaks):
    """As the docs show it, on a folder the runner measured (whose grid's asv classes include the head-parallel
    one, whose area no grid has)."""
    run = measure(tmp_path / "run")
    done = subprocess.run([sys.executable, os.path.join(SCRIPTS, "estimate_asv_duration.py"), run, "--grid", "quick"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"2 measured CPU cases in {run}" in done.stdout and "benchmark processes" in done.stdout


def test_the_main_jobs_last_line_gives_each_stage_its_seconds(monkeypatch):
    from attention_bench import measuring

    clock = iter([100.0, 300.0, 330.0, 380.0, 392.0])
    monkeypatch.setattr(measuring.time, "time", lambda: next(clock))
    stages = measuring.Stages()
    for stage in ("grid", "profiles", "pairs", "report"):
        stages.done(stage)
    assert str(stages) == "292 s (grid 200 s, profiles 30 s, pairs 50 s, report 12 s)"
    # the pairs' sessions between the grid's rounds count as the pairs' time, with their sessions after
    clock = iter([100.0, 300.0, 330.0, 380.0, 392.0])
    stages = measuring.Stages()
    stages.done("grid", {"pairs": 40.0})
    for stage in ("profiles", "pairs", "report"):
        stages.done(stage)
    assert str(stages) == "292 s (grid 160 s, pairs 90 s, profiles 30 s, report 12 s)"
