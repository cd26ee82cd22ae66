"""Where a rerun lands: the interval a figure states holds another run's figure about as often as it says."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import pairs
from benchmarks.core.pairing import mirrored, sessions
from benchmarks.core.timing import measure, rerun
from reports import spans_over_processes, tidy
from reports.analyses.spread import ratio_interval


@pytest.mark.parametrize(("dof", "quantile"), [(1, 12.706), (2, 4.303), (4, 2.776), (6, 2.447), (30, 2.042)])
def test_t_quantiles_are_students(dof, quantile):
    assert rerun.t_quantile(0.975, dof) == pytest.approx(quantile, abs=2e-3)


def test_bad_quantile_arguments_are_named():
    with pytest.raises(ValueError, match="p=0.3, dof=2"):
        rerun.t_quantile(0.3, 2)


def _coverage(sigma_of_case, k: int, trials: int = 1500, seed: int = 0) -> tuple[float, float]:
    """How often a second run's median of k processes falls inside the first run's interval: the rerun
    interval's rate and the processes' range's rate, cases drawn with ``sigma_of_case``."""
    rng = np.random.default_rng(seed)
    sigmas = sigma_of_case(rng, 200)
    prior = rerun.typical_variance([rng.normal(0, s, k) for s in sigmas])
    rerun_in = range_in = 0
    for i in range(trials):
        first, second = rng.normal(0, sigmas[i % len(sigmas)], (2, k))
        rerun_in += abs(np.median(second) - np.median(first)) <= rerun.half_width(first, prior)
        range_in += first.min() <= np.median(second) <= first.max()
    return rerun_in / trials, range_in / trials


@pytest.mark.parametrize("k", [3, 5])
def test_a_rerun_lands_inside_the_interval_about_as_often_as_it_says_and_not_inside_the_range(k):
    same = lambda rng, n: np.full(n, 0.05)  # noqa: E731
    varied = lambda rng, n: 0.05 * np.exp(rng.normal(0, 0.5, n))  # noqa: E731  cases 2x apart in spread
    for sigmas in (same, varied):
        inside, in_range = _coverage(sigmas, k)
        assert 0.92 <= inside <= 0.995
        assert in_range < 0.85  # three processes' range leaves out a rerun's median often


def test_a_case_without_spread_of_its_own_takes_its_areas():
    prior = 0.05**2
    flat = rerun.half_width(np.zeros(3), prior)
    assert flat > 0.05  # three equal processes do not make a rerun certain
    assert rerun.half_width(np.array([0.0, 0.3, -0.3]), prior) > 2 * flat  # its own wide spread counts
    assert math.isnan(rerun.half_width(np.zeros(1), None))


def test_a_typical_variance_is_not_set_by_a_few_two_mode_cases():
    rng = np.random.default_rng(1)
    logs = [rng.normal(0, 0.05, 3) for _ in range(40)] + [np.log([1.0, 2.0, 2.0])] * 4
    assert math.sqrt(rerun.typical_variance(logs)) == pytest.approx(0.05, rel=0.35)
    assert rerun.typical_variance([np.zeros(1)]) is None


@settings(max_examples=50, deadline=None)
@given(st.floats(0.01, 0.5), st.floats(0.01, 0.5), st.floats(1e-3, 1e3), st.floats(1e-3, 1e3))
def test_a_ratios_interval_adds_the_two_half_widths_in_quadrature(w_a, w_b, a, b):
    low, high = ratio_interval((a, *rerun.interval(a, w_a)), (b, *rerun.interval(b, w_b)))
    assert math.log(high / low) / 2 == pytest.approx(math.hypot(w_a, w_b))
    assert math.sqrt(low * high) == pytest.approx(b / a)


def test_two_figures_differ_when_further_apart_than_their_intervals_say_even_if_they_overlap():
    a = (2.0, *rerun.interval(2.0, 0.25))
    assert rerun.apart(a, (2.6, *rerun.interval(2.6, 0.08)))  # the intervals overlap: still apart
    assert not rerun.apart(a, (2.3, *rerun.interval(2.3, 0.08)))
    assert rerun.apart(a, (2.3, None, None)) is None


def _record(area, medians, pid0=0):
    rounds = [{"median_s": m, "q25_s": m, "q75_s": m, "blocks": 5, "calls_per_block": 1, "pid": pid0 + i,
               "started_at": "2026-01-01T00:00:00+00:00", "control_flops_per_s": None, "others_cpu_share": None,
               "faults_per_call": None} for i, m in enumerate(medians)]
    return {"area": area, "method": "forward", "params": {"device": "cpu", "seq_len": 8}, "status": "ok",
            "reason": None, "commit": "abc", "started_at": "2026-01-01T00:00:00+00:00", "rounds": rounds,
            **measure.combined(rounds)}


def test_a_time_over_processes_states_where_a_rerun_lands_and_keeps_its_processes_range():
    area = [_record("attention", [0.010 * f for f in (1.0, 1.05, 0.95)], 10 * i) for i in range(8)]
    flat = _record("attention", [0.020, 0.020, 0.020], 100)
    priors = spans_over_processes.priors([*area, flat])
    own = float(np.std(np.log([1.0, 1.05, 0.95]), ddof=1))  # every case's: the typical one's, a little more
    assert own < math.sqrt(priors["attention", "cpu"]) < 1.25 * own  # (a median of variances reads low)
    row = next(r for r in tidy._runner_rows(flat, {"machine": "vm", "run": "r", "commit": "abc"},
                                            prior=priors["attention", "cpu"]) if r["metric"] == "time")
    assert row["lowest"] == row["highest"] == 0.020  # the processes agree exactly...
    assert row["low"] < 0.019 and row["high"] > 0.021  # ...and a rerun still moves as the area's cases do
    assert row["low"] * row["high"] == pytest.approx(0.020**2)
    table = tidy.frame([row])
    assert {"lowest", "highest"} <= set(table.columns) and isinstance(table, pd.DataFrame)


def _pair_rounds(per_pair: list[list[list[float]]]) -> sessions.PairRounds:
    """PairRounds holding each pair's rounds, grouped by session (no worker started)."""
    rounds_of = sessions.PairRounds([], [], [(None, None)] * len(per_pair), pairs.BLOCK_S)
    for p, per_session in enumerate(per_pair):
        for s, ratios in enumerate(per_session):
            rounds_of.ratios[p] += ratios
            rounds_of.sessions[p] += [s] * len(ratios)
    return rounds_of


def test_a_paired_ratios_interval_is_over_its_sessions_not_its_rounds():
    steady = [[2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]
    moved = [[2.0, 2.01], [2.2, 2.21], [1.9, 1.91]]  # rounds agree within a session, sessions do not
    typical = [[[3.0, 3.01], [3.05, 3.06], [2.97, 2.98]]] * 6
    est = _pair_rounds([moved, steady, *typical]).estimates()
    bootstrap = mirrored.estimate(sum(moved, []), [0, 0, 1, 1, 2, 2])
    assert est[0].low < 1.9 and est[0].high > 2.2  # where a rerun's sessions may land
    assert est[0].high / est[0].low > bootstrap.high / bootstrap.low
    assert est[1].low < 2.0 < est[1].high and est[1].high / est[1].low > 1.02  # the run's typical spread
    one_session = _pair_rounds([[[2.0, 2.1, 1.9, 2.05]]]).estimates()[0]
    assert (one_session.low, one_session.high) == pytest.approx(
        (mirrored.estimate([2.0, 2.1, 1.9, 2.05]).low, mirrored.estimate([2.0, 2.1, 1.9, 2.05]).high))


def test_an_interval_from_draws_is_their_log_spread_at_z_times_sqrt_2():
    draws = np.exp(np.random.default_rng(1).normal(np.log(0.07), 0.1, 20000))
    low, high = rerun.from_draws(0.07, draws)
    assert math.log(high / 0.07) == pytest.approx(rerun.Z * 0.1 * math.sqrt(2), rel=0.02)
    assert low * high == pytest.approx(0.07**2)
    # drawn over 3 clusters (processes) resampled: the spread scaled back by sqrt(3/2), at t with 2 dof
    low, high = rerun.from_draws(0.07, draws, clusters=3)
    assert math.log(high / 0.07) == pytest.approx(
        rerun.t_quantile(0.975, 2) * 0.1 * math.sqrt(3 / 2) * math.sqrt(2), rel=0.02)


@pytest.mark.parametrize("n, p", [(12, 0.9), (12, 0.5), (30, 0.97)])
def test_a_counts_interval_holds_a_reruns_count_about_as_often_as_it_says(n, p):
    rng = np.random.default_rng(2)
    counts, reruns = rng.binomial(n, p, 4000), rng.binomial(n, p, 4000)
    inside = np.mean([lo <= r <= hi for (lo, hi), r in zip(
        (rerun.count_interval(int(c), n) for c in counts), reruns, strict=True)])
    assert inside >= 0.93
    assert rerun.count_interval(n, n)[0] < n and rerun.count_interval(0, n)[1] > 0  # all or none still varies
    assert all(0 <= lo <= c <= hi <= n for c in range(n + 1) for lo, hi in [rerun.count_interval(c, n)])


def test_a_pairs_prior_is_the_typical_variance_of_its_own_kind():
    steady = [[[3.0], [3.02], [2.98]]] * 4  # C1's pairs: sessions within 1%
    swinging = [[[0.5], [0.25], [0.45]]] * 4  # C2's: a GEMM's blocks beside attention in two memory states
    mixed = _pair_rounds([*steady, *swinging])
    alone = mixed.estimates()[0]
    mixed.kinds = ["c1"] * 4 + ["c2"] * 4
    kept = mixed.estimates()
    assert kept[0].high / kept[0].low < alone.high / alone.low  # C2's swings no longer widen C1's intervals
    assert kept[4].high / kept[4].low > kept[0].high / kept[0].low
