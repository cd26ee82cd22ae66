"""One checker for every published figure (reports.ranges): a test per rule, and what the page does with a
figure outside its range (withheld, and why said)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from reports import ranges, tidy
from reports.analyses.base import Analysis


@pytest.mark.parametrize("key, good, bad", [
    ("best_fraction_cpu_sdpa", [0.8, 1.05], [1.18, 0.0, -0.1]),  # a fraction of a peak: (0, 1.05]
    ("fraction_of_peak", [0.3], [1.2]),
    ("median_comm_share", [0.0, 0.4, 1.0], [1.01, -0.01]),  # a share: [0, 1]
    ("matmul_share attention", [0.9], [1.5]),
    ("efficiency_attention_p2", [0.5, 1.0], [1.2, 0.0]),  # parallel efficiency: (0, 1.05]
    ("speedup_rnn-width_p2", [0.6, 1.9, 2.1], [0.01, 0.49, 2.2]),  # on p threads: [1/p, 1.05 p]
    ("speedup_attention_p4", [0.26, 4.1], [0.2, 4.3]),
    ("corr_log_time_log_score_bytes_batched", [-1.0, 0.9], [1.2]),  # a correlation: [-1, 1]
    ("c1_tiny_n128_cpu", [0.6, 11.0], [0.0, -1.0, math.inf]),  # a paired ratio: positive, finite
    ("speedup_cpu_tiny_n128", [5.0], [0.0]),
    ("gemm_peak_cpu", [2e11], [0.0, -1.0]),
    ("time_crossover_d128", [128.0, float("nan")], [-5.0]),  # NaN: none, not published
    ("cases", [0, 182], [-1]),  # a count: >= 0
    ("median_error", [0.0, 0.12], [-0.1]),
    ("exponent_cpu_tiny_forward_transformer", [1.2, -0.1], [math.inf]),  # anything else: finite
])
def test_each_rule_passes_its_range_and_withholds_outside_it(key, good, bad):
    for v in good:
        assert ranges.why_out_of_range(key, v) is None, (key, v)
    for v in bad:
        assert ranges.why_out_of_range(key, v), (key, v)


def test_the_thread_rule_says_why_a_starved_run_is_withheld():
    why = ranges.why_out_of_range("speedup_transformer_p2", 0.01)
    assert "below 1/2" in why and "other processes" in why


def test_an_analysis_with_a_figure_out_of_range_publishes_none_of_its_figures_and_says_why():
    a = Analysis("c2_roofline", "Achieved FLOP/s", "C2", "math 52%, sdpa 118%", answer="sdpa 118% of the peak",
                 numbers={"best_fraction_cpu_sdpa": 1.18, "best_fraction_cpu_math": 0.52, "gemm_peak_cpu": 9.85e10})
    a.tables["achieved_cpu"] = pd.DataFrame({"sdpa": [1.16e11]})
    checked = ranges.check(a)
    assert math.isnan(checked.numbers["best_fraction_cpu_sdpa"]) and checked.numbers["best_fraction_cpu_math"] == 0.52
    assert "118%" not in checked.answer and checked.answer.startswith("Withheld: 1 figure out of range")
    assert "best_fraction_cpu_sdpa = 1.18 (a fraction of a peak, outside (0, 1.05])" in checked.answer
    assert "Withheld" in checked.verdict and checked.missing and "achieved_cpu" in checked.tables
    fine = Analysis("x", "t", "C1", "v", answer="a", numbers={"c1_tiny_n128_cpu": 5.0})
    assert ranges.check(fine).answer == "a" and not fine.missing


def test_rows_of_the_table_out_of_range_are_withheld_with_their_reason():
    t = pd.DataFrame([{"metric": "fraction_of_peak", "value": 1.18, "status": "ok", "reason": None},
                      {"metric": "fraction_of_peak", "value": 0.5, "status": "ok", "reason": None},
                      {"metric": "others_cpu_share", "value": -0.2, "status": "ok", "reason": "x"},
                      {"metric": "time", "value": float("nan"), "status": "oom", "reason": "out of memory"}],
                     columns=tidy.COLUMNS)
    out = ranges.check_table(t)
    assert math.isnan(out.value[0]) and out.value[1] == 0.5 and math.isnan(out.value[2])
    assert out.reason[0].startswith("withheld: fraction_of_peak = 1.18 is a fraction of a peak")
    assert out.reason[2].endswith("; x") and out.reason[3] == "out of memory" and list(out.status) == list(t.status)
