"""The page's and compare's tables: no NaN, None or <NA> shown, and the runs' rounds named."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from run_helpers import measure, measured_run

from attention_bench.cli import main as attention_bench
from reports import sensitivity, tidy

# -- tables never show NaN, None or <NA> ------------------------------------------------------

@pytest.mark.slow
def test_missing_cells_are_dashes_in_the_page_and_in_compare(tmp_path, fake_peaks, capsys):
    import re

    from reports import html

    frame = pd.DataFrame({"n": pd.array([1, None], dtype="Int64"), "name": ["a", None], "x": [1.5, float("nan")],
                          "when": pd.to_datetime(["2026-01-01", None])})
    cells = re.findall(r"<td>([^<]*)</td>", html._html(frame))
    assert cells == ["1", "a", "1.5", "2026-01-01 00:00:00", "—", "—", "—", "—"]
    a, b = measured_run(tmp_path / "a"), measure(tmp_path / "b")
    assert attention_bench(["compare", a, b, "--report", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    page = open(tmp_path / "r" / "index.html").read()
    for text in (out, page):
        assert not re.search(r"\bNaN\b|<NA>|&lt;NA&gt;|\bNone\b|\bNaT\b", text.replace("No ", "")), text
    # the runs' agreement is kept with the compare's report, for docs generated from it (reports.measured)
    from reports import measured
    from reports.analyses import noise

    saved = measured.load(str(tmp_path / "r" / "report.json"))["agreement"]
    assert saved == noise.agreements(tidy.load([a, b])) and len(saved) == 1
    assert (saved[0]["first"], saved[0]["second"]) == (os.path.normpath(a), os.path.normpath(b))
    assert "Run-to-run agreement, " in measured.markdown(measured.load(str(tmp_path / "r" / "report.json")), "r.json",
                                                         ["agreement"])


@pytest.mark.slow
def test_an_agreement_names_the_rounds_each_run_was_timed_in(tmp_path, fake_peaks, capsys):
    from reports import measured

    a, b = measure(tmp_path / "a"), measure(tmp_path / "b", rounds=2)
    t = tidy.load([a, b])
    assert set(t[t.metric == "time"].groupby("run").rounds.max().items()) == {(os.path.normpath(a), 1),
                                                                              (os.path.normpath(b), 2)}
    assert attention_bench(["compare", a, b, "--report", str(tmp_path / "r")]) == 0
    assert f"{os.path.normpath(b)} against {os.path.normpath(a)} (timed in 1 and 2 rounds)," in capsys.readouterr().out
    record = measured.load(str(tmp_path / "r" / "report.json"))
    assert record["agreement"][0]["rounds"] == [1, 2]
    assert f"`{os.path.normpath(b)}` against `{os.path.normpath(a)}` (timed in 1 and 2 rounds)," in measured.markdown(
        record, "r.json", ["agreement"])
    assert ", 2 rounds)" in measured.markdown(record, "r.json")  # the analysed run, in the block's first line


def sensitivity_record(generated: str, slower: int) -> dict:
    trial = {"exit": 0, "cases": 8, "slower": slower, "ratios": [1.0] * 8, "seconds": 150.0}
    return {"kind": "gate-sensitivity", "generated": generated, "commit": "abcdef12", "trials": 1, "budget_s": 165.0,
            "machine": {"cpu_model": "CPU", "cpu_count": 2, "torch": "2.13.0"}, "done": True,
            "results": {"python -m benchmarks.gate": {"control": [trial], "10%": [{**trial, "slower": 8}]},
                        "asv continuous --factor 1.05": {"control": [trial], "10%": [{**trial, "slower": 3}]}}}


def test_the_newest_sensitivity_record_is_the_one_shown(tmp_path):
    from benchmarks.core.records import write_json_atomic

    write_json_atomic(str(tmp_path / "a.json"), sensitivity_record("2026-12-01T10:00:00", 0))
    write_json_atomic(str(tmp_path / "b.json"), sensitivity_record("2026-12-05T10:00:00", 1))
    (tmp_path / "c.json").write_text("{not json")
    path, record = sensitivity.latest([str(tmp_path / "*.json")])
    assert path.endswith("b.json") and record["generated"].startswith("2026-12-05")
    table = sensitivity.table(record)
    assert list(table["method"]) == ["attention-bench gate"] * 2 + ["asv continuous --factor 1.05"] * 2
    assert list(table["injected"])[:2] == ["none (a comment)", "10%"]
    assert sensitivity.latest([str(tmp_path / "none-*.json")]) is None


@pytest.mark.slow
def test_the_report_shows_what_a_regression_check_sees_here(tmp_path, fake_peaks, monkeypatch):
    from benchmarks.core.records import write_json_atomic

    run = measure(tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    assert attention_bench(["report", run, "--report", str(tmp_path / "r1")]) == 0
    first = (tmp_path / "r1" / "index.html").read_text()
    assert "Not measured here: <code>python scripts/gate_sensitivity.py</code>" in first
    saved = tmp_path / "results" / "gate" / "sensitivity.json"
    write_json_atomic(str(saved), sensitivity_record("2026-12-05T10:00", 0))
    assert attention_bench(["report", run, "--report", str(tmp_path / "r2")]) == 0
    page = (tmp_path / "r2" / "index.html").read_text()
    assert "What a regression check sees on this machine" in page and "results/gate/sensitivity.json" in page
    assert "asv continuous --factor 1.05" in page and "8 of 8" in page and "3 of 8" in page
    assert "No paired history here" in page and "Not measured here: <code>python scripts/history_vs_asv.py" in page
    # a paired history with a step, and a history-vs-asv record: the section lists the step and the comparison
    from test_asv_paired import LATER, REFERENCE, history_record, history_vs_asv_record

    from benchmarks import cases

    folder = tmp_path / "results" / "history" / "aaaaaaaa-quick"
    timed = cases.select("layers", "quick", device="cpu")[:1]
    for i, (commit, ratio) in enumerate(((REFERENCE, 1.0), (LATER, 1.2))):
        write_json_atomic(str(folder / f"{commit}.json"), {**history_record(commit, ratio, timed), "threshold": 0.05,
                                                           "generated": f"2026-12-05T10:0{i}:00+00:00"})
    write_json_atomic(str(tmp_path / "results" / "history" / "history-vs-asv.json"), history_vs_asv_record())
    assert attention_bench(["report", run, "--report", str(tmp_path / "r3")]) == 0
    page = (tmp_path / "r3" / "index.html").read_text()
    assert "Steps in this machine's paired histories" in page and LATER[:8] in page and "1.200" in page
    assert "A commit history, paired and by asv" in page
    assert "asv run -a rounds=4 --interleave-rounds: asv's step detection" in page
