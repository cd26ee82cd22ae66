"""A paired history as asv results: each timed case's ratio to the reference and its interval, where asv reads
them (its own Results reader), beside the area's asv class, and benchmarks.json merged rather than replaced."""

import json
import os

import pytest
from asv.results import Results

from benchmarks import cases
from reports import asv_paired

REFERENCE, LATER = "a" * 40, "b" * 40


def history_record(commit, ratio, cases_, reference=REFERENCE):
    rows = [{"area": "layers", "method": "forward", "params": p, "case": str(p), "ratio": ratio * (1 + i / 100),
             "low": ratio * (1 + i / 100) - 0.01, "high": ratio * (1 + i / 100) + 0.02, "rounds": 12}
            for i, p in enumerate(cases_)]
    return {"kind": "history", "status": "ok", "commit": commit, "reference": reference,
            "generated": "2026-12-05T10:00:00+00:00", "cases": rows}


@pytest.fixture
def timed():
    return cases.select("layers", "quick", device="cpu")


def test_the_history_becomes_asv_results_beside_the_areas_class(tmp_path, timed):
    results = str(tmp_path / "results")
    os.makedirs(results)
    (tmp_path / "results" / "benchmarks.json").write_text(json.dumps({"version": 2, "x.Y.time_forward": {"a": 1}}))
    records = [history_record(REFERENCE, 1.0, timed), {"kind": "history", "status": "no models", "commit": "c" * 40},
               history_record(LATER, 1.1, timed)]
    written = asv_paired.write(records, results, "box")
    assert len(written) == 2 and all(os.path.exists(w) for w in written)
    name = "bench_layers.SelfAttentionVsRecurrentLayer.track_vs_reference_forward"
    defined = json.loads((tmp_path / "results" / "benchmarks.json").read_text())
    assert defined["x.Y.time_forward"] == {"a": 1}  # merged, not replaced
    assert defined[name]["type"] == "track" and defined[name]["param_names"] == list(cases.axes("layers", "quick"))
    later = Results.load(next(w for w in written if LATER[:8] in os.path.basename(w)))
    params = defined[name]["params"]
    values, stats = later.get_result_value(name, params), later.get_result_stats(name, params)
    assert len(values) == len(timed) and values == pytest.approx([1.1 * (1 + i / 100) for i in range(len(timed))])
    assert all(s["ci_99_a"] == pytest.approx(v - 0.01) and s["ci_99_b"] == pytest.approx(v + 0.02)
               for v, s in zip(values, stats, strict=True))
    assert later.env_name == f"paired-{REFERENCE[:8]}" and later.params["machine"] == "box"
    assert os.path.exists(tmp_path / "results" / "box" / "machine.json")


def test_untimed_parameters_are_missing_values_and_one_reference_is_required(tmp_path, timed):
    results = str(tmp_path / "results")
    records = [history_record(REFERENCE, 1.0, timed), history_record(LATER, 1.05, timed[:1])]
    written = asv_paired.write(records, results, "box")
    later = Results.load(next(w for w in written if LATER[:8] in os.path.basename(w)))
    name = "bench_layers.SelfAttentionVsRecurrentLayer.track_vs_reference_forward"
    params = json.load(open(os.path.join(results, "benchmarks.json")))[name]["params"]
    values = later.get_result_value(name, params)
    assert values[0] == pytest.approx(1.05) and all(v != v or v is None for v in values[1:])
    with pytest.raises(ValueError, match="name one reference commit"):
        asv_paired.write([history_record(REFERENCE, 1.0, timed), history_record(LATER, 1.0, timed, "d" * 40)],
                         results, "box")
    assert asv_paired.write([{"kind": "history", "status": "no models", "commit": "c" * 40}], results, "box") == []


def history_vs_asv_record():
    steps = {"paired": {"cases": 8, "found": {"4 (up)": 1.0, "8 (down)": 0.75}, "false_steps": []},
             "asv": {"cases": 8, "found": {"4 (up)": 0.5, "8 (down)": 0.25}, "false_steps": [["c", 2], ["d", 6]]},
             "asv regressions list": {"cases": 8, "found": {"4 (up)": 0.375, "8 (down)": 0.0},
                                      "false_steps": [["c", 2]]}}
    return {"kind": "history-vs-asv", "generated": "2026-12-06T01:00:00+00:00", "commit": "f" * 40,
            "machine": {"cpu_model": "AMD EPYC", "cpu_count": 2, "torch": "2.13.0+cpu"}, "regime": None,
            "threshold": 0.03, "budget_s": 60, "asv_setting": "-a rounds=4 --interleave-rounds",
            "asv_regression_threshold": 0.05, "cases": 8, "scores": steps,
            "factors": [0.05] * 4 + [0.0815] * 4 + [0.06551724] * 2,  # 3% slower at commit 4, 1.5% faster at 8
            "results": {"paired": {"seconds": 540, "seconds_per_timed_commit": [50, 62, 58]}, "asv": {"seconds": 720}}}


def test_the_history_against_asv_renders_what_each_named():
    from reports import measured, sensitivity

    table = sensitivity.history_table(history_vs_asv_record())
    assert list(table["3% slowdown at commit 4: named in"]) == ["100%", "50%", "38%"]  # the sizes from the spins
    assert list(table["1.5% speed-up at commit 8: named in"]) == ["75%", "25%", "- (lists slowdowns only)"]
    assert list(table["false steps"]) == [0, 2, 1] and table["time"][0] == "9.0 min, 58 s a timed commit"
    summary = measured.markdown(history_vs_asv_record(), "docs/measured/x-history-vs-asv.json", ["summary"])
    assert ("`attention-bench history` 100% and 75%, 0 false; asv's step detection 50% and 25%, 2 false; asv's "
            "regressions list 38%, 1 false (58 s a commit paired)") in summary


def test_the_report_shows_the_newest_history_against_asv(tmp_path):
    from reports import sensitivity

    older, newer = history_vs_asv_record(), {**history_vs_asv_record(), "generated": "2026-12-07T01:00:00+00:00"}
    for name, record in (("a-history-vs-asv.json", newer), ("b-history-vs-asv.json", older)):
        (tmp_path / name).write_text(json.dumps(record))
    (tmp_path / "c-history-vs-asv.json").write_text("{not json")
    path, record = sensitivity.latest_history([str(tmp_path / "*history-vs-asv*.json")])
    assert path.endswith("a-history-vs-asv.json") and record["generated"].startswith("2026-12-07")
    assert sensitivity.latest_history([str(tmp_path / "none*.json")]) is None


def test_the_report_lists_the_steps_of_the_histories_here(tmp_path, timed):
    """A step (the case's ratio moved beyond the history's threshold, intervals apart) is listed, in the order
    the commits were timed; a history without one lists none."""
    folder = tmp_path / "results" / "history" / "aaaaaaaa-quick"
    folder.mkdir(parents=True)
    for i, (commit, ratio) in enumerate(((REFERENCE, 1.0), ("c" * 40, 1.0), (LATER, 1.2))):
        record = {**history_record(commit, ratio, timed[:1]), "threshold": 0.05,
                  "generated": f"2026-12-05T10:0{i}:00+00:00"}
        (folder / f"{commit}.json").write_text(json.dumps(record))
    (tmp_path / "results" / "history" / "history-vs-asv.json").write_text("{}")  # not a history folder
    found = asv_paired.folders(str(tmp_path / "results" / "history"))
    assert found == [str(folder)]
    steps = asv_paired.steps_table(found)
    assert list(steps.commit) == [LATER[:8]] and list(steps.after) == ["c" * 8] and list(steps.change) == ["1.200"]
    (folder / f"{LATER}.json").unlink()
    assert asv_paired.steps_table(found).empty


def test_the_tidy_table_reads_asvs_measurements_not_the_paired_ratios(tmp_path, timed):
    """``attention-bench report .asv/results`` after ``site``: asv's own results are read, the ratios are not."""
    from test_tidy import write_asv_results

    from reports import tidy

    root = str(tmp_path / "results")
    write_asv_results(root)
    asv_paired.write([history_record(REFERENCE, 1.0, timed), history_record(LATER, 1.1, timed)], root, "box")
    t = tidy.load([root])
    assert not t.metric.str.contains("reference").any() and (t.metric == "time").any()
