"""The page's and compare's tables: no NaN, None or <NA> shown, and the runs' rounds named."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from run_helpers import measure

from reports import tidy
from reports.__main__ import main as reports_main

# -- tables never show NaN, None or <NA> ------------------------------------------------------

@pytest.mark.slow
def test_missing_cells_are_dashes_in_the_page_and_in_compare(tmp_path, fake_peaks, capsys):
    import re

    from reports import html

    frame = pd.DataFrame({"n": pd.array([1, None], dtype="Int64"), "name": ["a", None], "x": [1.5, float("nan")],
                          "when": pd.to_datetime(["2026-01-01", None])})
    cells = re.findall(r"<td>([^<]*)</td>", html._html(frame))
    assert cells == ["1", "a", "1.5", "2026-01-01 00:00:00", "—", "—", "—", "—"]
    a, b = measure(tmp_path / "a"), measure(tmp_path / "b")
    assert reports_main(["compare", a, b, "--report", str(tmp_path / "r")]) == 0
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
    assert reports_main(["compare", a, b, "--report", str(tmp_path / "r")]) == 0
    assert f"{os.path.normpath(b)} against {os.path.normpath(a)} (timed in 1 and 2 rounds)," in capsys.readouterr().out
    record = measured.load(str(tmp_path / "r" / "report.json"))
    assert record["agreement"][0]["rounds"] == [1, 2]
    assert f"`{os.path.normpath(b)}` against `{os.path.normpath(a)}` (timed in 1 and 2 rounds)," in measured.markdown(
        record, "r.json", ["agreement"])
    assert ", 2 rounds)" in measured.markdown(record, "r.json")  # the analysed run, in the block's first line
