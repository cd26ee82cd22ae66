"""Analyses on synthetic tables with known answers: a wrong fit or a wrong verdict fails here."""


import math

import numpy as np
import pandas as pd
import pytest

from benchmarks import cases
from reports import spans_over_processes, tidy
from reports.analyses import (
    c1_generation,
    c1_length,
    c1_threads,
    c2_roofline,
    c3_heads,
    fits,
    hardware,
    registry,
    runs,
    table1,
)
from transformer import flops


def rows(area, metric, values, method="forward", machine="m", **fixed):
    """Tidy rows: ``values`` maps a tuple of (axis, value) pairs to the measured value."""
    out = []
    for params, value in values.items():
        out.append({"source": "runner", "machine": machine, "commit": "c", "area": area, "method": method,
                    "metric": metric, "unit": tidy.UNITS[metric], "value": value, "status": "ok",
                    **fixed, **dict(params)})
    return out


def table(*groups) -> pd.DataFrame:
    return pd.DataFrame([r for g in groups for r in g], columns=tidy.COLUMNS)


def test_power_law_fit_recovers_an_exponent_of_exactly_two():
    k, c = fits.fit_power_law([1, 2, 4, 8, 16], [3 * n**2 for n in [1, 2, 4, 8, 16]])
    assert k == pytest.approx(2.0, abs=1e-12) and c == pytest.approx(3.0)
    with pytest.raises(ValueError, match="two distinct positive x"):
        fits.fit_power_law([4, 4], [1, 2])


def test_crossover_is_interpolated_in_log_space_and_none_without_a_crossing():
    x = [10, 50, 200, 1000]
    assert fits.crossover(x, x, [100] * 4) == pytest.approx(100.0)
    assert fits.crossover(x, [1] * 4, [2] * 4) is None
    assert fits.crossover(x, [1, 2, 3, 4], [1, 1, 1, 1]) == 10  # exact tie


def model_times(scale=1.0):
    ns = [8, 16, 32, 64, 128, 256, 512]
    tf = {(("model", "transformer"), ("seq_len", n)): scale * 1e-3 * n for n in ns}
    rnn = {(("model", "rnn-width"), ("seq_len", n)): scale * 1e-5 * n**2 for n in ns}
    return rows("models", "time", {**tf, **rnn}, device="cpu", preset="tiny", batch=8)


def test_sequence_length_fits_exponents_and_finds_the_crossover():
    train = [dict(r, method="train_step", value=3 * r["value"]) for r in model_times()]
    a = c1_length.analyse(table(model_times(), train))
    assert a.numbers["exponent_cpu_tiny_train_step_rnn-width"] == pytest.approx(2.0)
    assert "time_cpu_tiny_train_step" in a.tables
    assert a.numbers["exponent_cpu_tiny_forward_transformer"] == pytest.approx(1.0)
    assert a.numbers["exponent_cpu_tiny_forward_rnn-width"] == pytest.approx(2.0)
    assert a.numbers["speedup_cpu_tiny_n512"] == pytest.approx(1e-5 * 512**2 / (1e-3 * 512))
    assert "cross at n ≈ 100" in a.verdict
    # the verdict names what it was computed on
    assert "tiny (d_model 32, 2+2 layers, h 4), batch 8, cpu" in a.verdict and "n = 8..512" in a.verdict
    assert any("no GPU results" in m for m in a.missing)


def test_generation_compares_parallel_and_sequential_throughput():
    fwd = rows("models", "tokens_per_s", {(("model", "transformer"),): 1000.0, (("model", "rnn-width"),): 250.0},
               device="cpu", seq_len=64)
    gen = rows("models", "tokens_per_s", {(("model", "transformer"),): 100.0, (("model", "rnn-width"),): 125.0},
               method="generate", device="cpu", seq_len=64)
    a = c1_generation.analyse(table(fwd, gen))
    assert a.numbers["parallel_advantage_cpu_transformer_n64"] == pytest.approx(10.0)
    assert a.numbers["parallel_advantage_cpu_rnn-width_n64"] == pytest.approx(2.0)
    assert a.numbers["transformer_over_rnn_forward_cpu"] == pytest.approx(4.0)
    assert a.numbers["transformer_over_rnn_generate_cpu"] == pytest.approx(0.8)
    assert "4.00× teacher-forced but 0.80× in generation" in a.verdict
    assert "no measured spread" not in a.verdict  # no times, no sample counts: nothing claimed either way

    def timed(samples):
        fixed = {"device": "cpu", "seq_len": 64, "preset": "paper-base", "batch": 8}
        out = []
        for method, per_s in (("forward", {"transformer": 1000.0, "rnn-width": 250.0}),
                              ("generate", {"transformer": 100.0, "rnn-width": 125.0})):
            for metric, f in (("tokens_per_s", lambda v: v), ("time", lambda v: 512 / v)):
                out += [dict(r, samples=samples if metric == "time" else None) for r in rows(
                    "models", metric, {(("model", m),): f(v) for m, v in per_s.items()}, method=method, **fixed)]
        return table(out)

    once = c1_generation.analyse(timed(1)).verdict
    assert "4 of the 4 times at n = 64 rest on fewer than 3 timed values (as few as 1), so these ratios have no " \
           "measured spread" in once
    assert "no measured spread" not in c1_generation.analyse(timed(7)).verdict


def test_threads_speedup_and_efficiency():
    perfect = {(("workload", "attention"), ("threads", p)): 1.0 / p for p in (1, 2, 4)}
    serial = {(("workload", "rnn-width"), ("threads", p)): 1.0 for p in (1, 2, 4)}
    a = c1_threads.analyse(table(rows("threads", "time", {**perfect, **serial})))
    assert a.numbers["speedup_attention_p4"] == pytest.approx(4.0)
    assert a.numbers["efficiency_attention_p4"] == pytest.approx(1.0)
    assert a.numbers["efficiency_rnn-width_p4"] == pytest.approx(0.25)
    assert "attention scales best, rnn-width worst" in a.verdict
    # speed-ups whose intervals do not set them apart are named alike (rerun.apart), not ranked by their values
    a.numbers = {f"speedup_{w}_p2": v for w, v in (("attention", 1.81), ("multihead", 1.90), ("rnn-width", 0.92),
                                                      ("transformer", 1.22))}
    a.intervals = {f"speedup_{w}_p2": (lo, hi) for w, lo, hi in (("attention", 1.63, 2.01), ("multihead", 1.70, 2.12),
                                                                ("rnn-width", 0.82, 1.03), ("transformer", 1.10, 1.36))}
    workloads = ["attention", "multihead", "rnn-width", "transformer"]
    assert c1_threads.ranked(a, 2, workloads) == ("multihead and attention scale best (alike within their "
                                                   "intervals), rnn-width worst")
    a.intervals["speedup_rnn-width_p2"] = (0.5, 1.7)
    assert c1_threads.ranked(a, 2, workloads).endswith("rnn-width and transformer worst (alike within their "
                                                       "intervals)")
    a.intervals = {k: (v / 3, v * 3) for k, v in a.numbers.items()}
    assert c1_threads.ranked(a, 2, workloads) == "No workload scales apart from the others within their intervals"
    one = c1_threads.analyse(table(rows("threads", "time", {(("workload", "attention"), ("threads", 1)): 1.0})))
    assert one.missing and "at least two thread counts" in one.verdict


def test_thread_speed_ups_are_taken_process_by_process():
    """Each process times both thread counts seconds apart; the processes run at different speeds (their draw, the
    machine's moment), and the 2-thread case's slow process is not the 1-thread case's: the medians' ratio moves with
    that, the speed-up taken process by process does not."""
    speed = {1: 1.0, 2: 1.6, 3: 0.7}  # each process's slowness, which both its cases share
    slowest = {1: 1, 2: 3}  # and one more slow spell, in a different process for each thread count
    def record(threads, pids=(1, 2, 3)):
        return {"area": "threads", "method": "forward", "status": "ok", "params": {"workload": "attention",
                "threads": threads}, "rounds": [{"pid": pid, "median_s": (0.018 if threads == 1 else 0.01) * speed[pid]
                                                * (1.5 if slowest[threads] == pid else 1.0)} for pid in pids]}
    records = [record(1), record(2)]
    times = [{"area": "threads", "method": "forward", "metric": "time", "workload": "attention", "threads": p,
              "value": float(np.median([r["median_s"] for r in rec["rounds"]])), "status": "ok"}
             for p, rec in ((1, records[0]), (2, records[1]))]
    [row] = spans_over_processes.speedups(records, times)
    logs = spans_over_processes.ratio_logs(*records)
    assert sorted(np.round(np.exp(logs), 3)) == [1.8 / 1.5, 1.8, 1.8 * 1.5]
    assert row["metric"] == spans_over_processes.SPEEDUP and row["threads"] == 2 and row["processes"] == 3
    assert row["value"] == pytest.approx(1.8) and row["low"] < 1.8 < row["high"]
    medians = times[0]["value"] / times[1]["value"]
    assert abs(medians / 1.8 - 1) > 0.1  # what the ratio of the medians would have said
    a = c1_threads.analyse(table(times, [row]))
    assert a.numbers["speedup_attention_p2"] == pytest.approx(1.8)
    assert a.intervals["speedup_attention_p2"] == (row["low"], row["high"])
    assert a.numbers["efficiency_attention_p2"] == pytest.approx(0.9) and "1.80×" in a.answer
    # processes that timed only one of the two (a case's extra rounds, say) pair nothing; one shared process: no row
    assert spans_over_processes.speedups([record(1, (1, 2)), record(2, (3,))], times) == []
    assert spans_over_processes.speedups([record(1), record(2, (1, 3))], times)[0]["processes"] == 2
    assert spans_over_processes.speedups([record(1, (1,)), record(2, (1, 3))], times) == []


def test_roofline_fraction_of_the_measured_peak():
    ranges = {"math": (10e9, 20e9), "sdpa": (30e9, 50e9)}
    achieved = {(("backend", b), ("seq_len", n)): v for b, (lo, hi) in ranges.items()
                for n, v in ((128, lo), (1024, hi))}
    peak = rows("gemm", "gemm_peak_flops_per_s", {(("threads", 2),): 100e9}, method="matmul", device="cpu",
                dtype="float32")
    a = c2_roofline.analyse(table(rows("attention", "achieved_flops_per_s", achieved, device="cpu",
                                                threads=2), peak))
    assert a.numbers["best_fraction_cpu_sdpa"] == pytest.approx(0.5)
    assert a.numbers["best_fraction_cpu_math"] == pytest.approx(0.2)
    assert "sdpa peaks at 50.0 GFLOP/s (50%) at n = 1024" in a.verdict
    # cases run at 1 thread are held to the 1-thread peak, not to the most threads' (which halved them here)
    one = rows("gemm", "gemm_peak_flops_per_s", {(("threads", 1),): 60e9}, method="matmul", device="cpu",
               dtype="float32")
    a = c2_roofline.analyse(table(rows("attention", "achieved_flops_per_s", achieved, device="cpu",
                                                threads=1), peak, one))
    assert a.numbers["best_fraction_cpu_sdpa"] == pytest.approx(50 / 60) and a.numbers["gemm_peak_cpu"] == 60e9
    # a peak withheld (NaN: out of range, or not predicted for another machine) is no peak, not an error
    withheld = [dict(r, value=float("nan")) for r in one]
    a = c2_roofline.analyse(table(rows("attention", "achieved_flops_per_s", achieved, device="cpu",
                                                threads=1), peak, withheld))
    assert math.isnan(a.numbers["gemm_peak_cpu"]) and "gemm_peak_cpu" not in a.intervals


def _math_at_n128(peak_span=None, **n128):
    """C2 on math attention at n = 128 (30 GFLOP/s at the median, with ``n128``'s spans) and n = 256 (32, steady),
    against a 100 GFLOP/s peak (with ``peak_span``: its interval)."""
    achieved = rows("attention", "achieved_flops_per_s", {(("backend", "math"), ("seq_len", 128)): 30e9,
                                                          (("backend", "math"), ("seq_len", 256)): 32e9},
                    device="cpu", threads=2)
    achieved[0].update(**n128)
    achieved[1].update(low=31e9, high=33e9)
    peak = rows("gemm", "gemm_peak_flops_per_s", {(("threads", 2),): 100e9}, method="matmul", device="cpu",
                dtype="float32")
    if peak_span:
        peak[0].update(low=peak_span[0], high=peak_span[1])
    return c2_roofline.analyse(table(achieved, peak))


def test_the_best_fraction_spans_every_n_that_a_process_could_make_the_best():
    # math at n = 128 ran at two levels (a process whose allocator kept its buffers, two that gave them back);
    # n = 256 is steady. The median makes n = 256 the best, but the interval must reach n = 128's fast process
    a = _math_at_n128(low=29e9, high=52e9, modes="8.9 ms in 1 process, 51 page faults per call; 16 ms in 2 "
                      "processes, 8160 page faults per call")
    assert a.numbers["best_fraction_cpu_math"] == pytest.approx(0.32)
    assert a.intervals["best_fraction_cpu_math"] == (pytest.approx(0.31), pytest.approx(0.52))
    assert "math 32% (31-52%)" in a.answer
    assert "(two modes at n = 128: 8.9 ms in 1 process, 51 page faults per call;" in a.verdict
    # a peak that a rerun's calibration moves: its interval, and each end of the fraction's further out
    moved = _math_at_n128(low=29e9, high=52e9, peak_span=(90e9, 110e9))
    assert moved.intervals["gemm_peak_cpu"] == (90e9, 110e9) and "(peak 100.0 (90-110) GFLOP/s)" in moved.answer
    low, high = moved.intervals["best_fraction_cpu_math"]
    assert low < 0.31 and high > 0.52 and moved.numbers["best_fraction_cpu_math"] == pytest.approx(0.32)


def test_a_case_at_two_modes_counts_at_its_faster_one_and_the_answer_says_its_slowest_process():
    # math at n = 128: 3 processes kept their buffers (52 GFLOP/s), 2 gave them back (27): the median of 5 falls in
    # either mode from run to run, so C2 (what a backend reaches) takes the faster mode, with its own interval
    a = _math_at_n128(low=25e9, high=56e9, lowest=27e9, highest=53e9, processes=5, fast=52e9, fast_low=49e9,
                      fast_high=55e9, modes="9 ms in 3 processes; 17 ms in 2 processes")
    assert a.numbers["best_fraction_cpu_math"] == pytest.approx(0.52)
    assert a.intervals["best_fraction_cpu_math"] == (pytest.approx(0.49), pytest.approx(0.55))
    assert "math 52% (49-55%) (its faster mode; its slowest process 27%)" in a.answer
    assert "counts at its faster one" in a.verdict
    assert a.quoted == ["gemm_peak_cpu", "best_fraction_cpu_math"]


def heads_table(flat=True):
    hs = [1, 2, 4, 8, 16, 32, 64]
    mm = {(("heads", h), ("strategy", "batched"), ("out_proj", wo)): (5e9 if flat else 5e9 * h) * (1 if wo else 0.8)
          for h in hs for wo in (True, False)}
    other = {(("heads", h), ("strategy", "batched"), ("out_proj", True)): 1e6 * h for h in hs}
    times = {(("heads", h), ("strategy", s), ("out_proj", wo)): t0 * (1 + 0.01 * h) * (1 if wo else 0.9)
             for h in hs for s, t0 in (("batched", 0.02), ("looped", 0.02)) for wo in (True, False)}
    return table(rows("multihead", "matmul_flops", mm, device="cpu"),
                 rows("multihead", "other_flops", other, device="cpu"),
                 rows("multihead", "time", times, device="cpu"))


def test_heads_verdict_says_same_flops_only_when_the_curve_is_flat():
    a = c3_heads.analyse(heads_table(flat=True))
    assert a.numbers["matmul_flops_max_over_min"] == 1.0 and "“same FLOPs” holds" in a.verdict
    assert a.numbers["time_ratio_h64_over_h1_batched"] == pytest.approx(1.64 / 1.01)
    assert a.tables["work"].score_bytes.loc[64] == 64 * a.tables["work"].score_bytes.loc[1]
    assert "Non-matmul work grows 64.0×" in a.verdict
    assert a.numbers["corr_log_time_log_score_bytes_batched"] > 0.9
    assert "Why: the batched strategy's time tracks" in a.verdict
    assert "changes least with h is batched" in a.verdict  # 0.02·(1 + 0.01h) for both; ties keep the first
    assert a.numbers["wo_flops_ratio"] == pytest.approx(1.25) and "W_O adds 25% of the matmul FLOPs" in a.verdict
    flat_time = heads_table(flat=True)
    flat_time.loc[flat_time.metric == "time", "value"] = 0.02
    untracked = c3_heads.analyse(flat_time)
    assert "does not track the score-matrix size" in untracked.verdict
    grown = c3_heads.analyse(heads_table(flat=False))
    assert grown.numbers["matmul_flops_max_over_min"] == 64 and "does not hold" in grown.verdict


def test_score_bytes_follow_the_case_shape():
    s = cases.MULTIHEAD_SHAPE
    assert c3_heads.score_bytes(8) == s["batch"] * 8 * s["seq_len"] ** 2 * 4


def layer_table():
    """Times proportional to the exact FLOPs of each layer: both cross where the FLOPs do, at n = d."""
    ns, ds = [32, 64, 128, 256, 512, 1024], [128, 256]
    fl, tm = {}, {}
    for n in ns:
        for d in ds:
            sa = flops.multi_head_attention(4, n, d, 8, strategy="sdpa").forward.matmul_total
            rec = flops.recurrent_layer(4, n, d).forward.matmul_total
            for layer, f in (("self-attention", sa), ("recurrent", rec)):
                fl[(("layer", layer), ("seq_len", n), ("d_model", d))] = f
                tm[(("layer", layer), ("seq_len", n), ("d_model", d))] = f / 1e10
    return table(rows("layers", "matmul_flops", fl, device="cpu"), rows("layers", "time", tm, device="cpu"))


def test_table1_finds_the_n_equals_d_crossover_and_the_exponents():
    a = table1.analyse(layer_table())
    assert a.numbers["flops_crossover_d128"] == pytest.approx(128)
    assert a.numbers["flops_crossover_d256"] == pytest.approx(256)
    assert a.numbers["time_crossover_d128"] == pytest.approx(128)
    assert a.numbers["time_exponent_n_recurrent"] == pytest.approx(1.0)
    assert a.numbers["time_exponent_d_recurrent"] == pytest.approx(2.0)
    # 8nd² + 4n²d at d = 256: between linear and quadratic in n
    assert 1.0 < a.numbers["matmul_flops_exponent_n_self-attention"] < 2.0
    assert ("d = 128: FLOPs cross at n = 128 (exact, from the FLOP model); measured time crosses at n ≈ 128 (1.00·d)"
            in a.verdict)


def test_the_flop_crossover_is_exact_even_between_the_grids_points():
    # a grid of n = 64 and 256 only: interpolating between them gave n = 110 at d = 128
    sparse = layer_table()
    sparse = sparse[sparse.seq_len.isin([64, 256])]
    a = table1.analyse(sparse)
    assert a.numbers["flops_crossover_d128"] == 128 and a.numbers["flops_crossover_d256"] == 256
    for d in (96, 128, 200):
        n = cases.layer_flop_crossover(d)
        assert n == d and all((cases.layer_flops("self-attention", m, d).forward.matmul_total
                               >= cases.layer_flops("recurrent", m, d).forward.matmul_total) == (m >= n)
                              for m in (n - 1, n, n + 1))


def test_hardware_ratios_raw_and_per_gemm_peak():
    fast = [dict(r, machine="fast", value=r["value"] / 2) for r in model_times()]
    peaks = (rows("gemm", "gemm_peak_flops_per_s", {(("threads", 2),): 1e11}, "matmul", "slow", device="cpu",
                  dtype="float32")
             + rows("gemm", "gemm_peak_flops_per_s", {(("threads", 8),): 2e11}, "matmul", "fast", device="cpu",
                    dtype="float32"))
    a = hardware.analyse(table([dict(r, machine="slow") for r in model_times()], fast, peaks))
    s = a.tables["speedup"].iloc[0]
    assert s.machine == "fast" and s.cases == 14
    assert s.median_speedup == pytest.approx(2.0) and s.median_speedup_per_peak == pytest.approx(1.0)
    alone = hardware.analyse(table(model_times()))
    assert alone.missing and "attention-bench report results/runs/<a>" in alone.verdict


def test_hardware_puts_the_gap_the_constants_predict_beside_the_measured_one():
    slow, fast = ([dict(r, machine=m, value=r["value"] * k) for r in model_times()]
                  for m, k in (("slow", 1), ("fast", 0.25)))
    predicted = ([dict(r, machine=m, metric="predicted_time", value=r["value"] * k) for r in model_times()]
                 for m, k in (("slow", 1), ("fast", 0.5)))  # the constants predict 2x of the 4x measured
    a = hardware.analyse(table(slow, fast, *predicted))
    s = a.tables["speedup"].iloc[0]
    assert s.median_speedup == pytest.approx(4.0) and s.median_predicted_speedup == pytest.approx(2.0)
    assert s.explained == pytest.approx(0.5)  # log 2 of log 4
    assert "predicts 2.00×: the constants explain 50% of the gap (in log)" in a.verdict
    without = hardware.analyse(table(slow, fast)).tables["speedup"].iloc[0]
    assert "median_predicted_speedup" not in without


def test_empty_results_degrade_visibly():
    empty = table()
    for f, with_profiles in registry.ANALYSES:
        a = f(empty, pd.DataFrame()) if with_profiles else f(empty)
        if a.key == "c5_scaling":  # computed, needs no results
            continue
        assert a.missing and a.verdict, a.key


def test_run_all_rejects_an_unknown_machine():
    with pytest.raises(ValueError, match="unknown machine 'x'"):
        registry.run_all(table(model_times()), "x")
    assert len(registry.run_all(table(model_times()))) == len(registry.ANALYSES) + 1


def test_the_paired_answers_hear_whether_the_machine_hands_its_free_memory_back(monkeypatch):
    seen = []
    monkeypatch.setattr(registry.paired, "reconcile", lambda *args: seen.append(args[-1]))
    registry.run_all(table([dict(r, free_page_reporting=True) for r in model_times()]))
    registry.run_all(table([dict(r, free_page_reporting=False) for r in model_times()]))
    registry.run_all(table(model_times()))  # a run from before the machine said: not known, not said
    assert seen == [True, False, False]


def test_analyses_use_each_machines_latest_run_only():
    old = [dict(r, commit="old", env="e", date=pd.Timestamp("2026-01-01", tz="UTC"), value=r["value"] * 100)
           for r in model_times()]
    new = [dict(r, commit="new", env="e", date=pd.Timestamp("2026-02-01", tz="UTC")) for r in model_times()]
    t = table(old, new)
    assert set(runs.latest(t).commit) == {"new"}
    a = registry.run_all(t)[0]
    assert a.numbers["speedup_cpu_tiny_n512"] == pytest.approx(1e-5 * 512**2 / (1e-3 * 512))


def test_hardware_normalises_by_the_peak_at_the_thread_count_each_case_ran_on():
    two = [dict(r, machine="two", threads=2) for r in model_times()]
    one = [dict(r, machine="one", threads=1, value=r["value"] * 1.5) for r in model_times()]
    peaks = [dict(r, machine=m) for m, per_thread in (("two", {1: 1e11, 2: 2e11}), ("one", {1: 1e11, 2: 2e11}))
             for r in rows("gemm", "gemm_peak_flops_per_s", {(("threads", n),): v for n, v in per_thread.items()},
                           "matmul", device="cpu", dtype="float32")]
    s = hardware.analyse(table(two, one, peaks)).tables["speedup"].iloc[0]
    assert s.cases == 14  # the same cases match although they ran on different thread counts
    assert s.median_speedup == pytest.approx(1 / 1.5)
    assert s.median_speedup_per_peak == pytest.approx((1 / 1.5) * 2e11 / 1e11)


def test_curves_never_pool_different_presets_or_batches():
    big = [dict(r, preset="paper-base", value=r["value"] * 10) for r in model_times()]
    a = c1_length.analyse(table(model_times(), big, big))  # paper-base measured twice as often
    assert a.numbers["speedup_cpu_tiny_n512"] == pytest.approx(1e-5 * 512**2 / (1e-3 * 512))
    assert a.numbers["speedup_cpu_paper-base_n512"] == pytest.approx(1e-5 * 512**2 / (1e-3 * 512))
    assert a.tables["time_cpu_paper-base_forward"]["transformer"].loc[8] == pytest.approx(10 * 1e-3 * 8)
    assert a.tables["time_cpu_tiny_forward"]["transformer"].loc[8] == pytest.approx(1e-3 * 8)


def test_c1_splits_the_time_ratio_into_flop_and_flops_per_second_ratios_and_finds_the_regime_change():
    def case(model, preset, n, time, flops):
        p = {"model": model, "preset": preset, "seq_len": n}
        return [dict(r, value=v) for r, v in zip(
            rows("models", "time", {tuple(p.items()): time}, device="cpu", batch=8, threads=2) +
            rows("models", "matmul_flops", {tuple(p.items()): flops}, device="cpu", batch=8, threads=2) +
            rows("models", "achieved_flops_per_s", {tuple(p.items()): flops / time}, device="cpu", batch=8,
                 threads=2), (time, flops, flops / time), strict=True)]

    data = [r for n in (16, 64) for r in
            case("transformer", "tiny", n, 1e-3 * n, 2e6 * n) + case("rnn-width", "tiny", n, 4e-3 * n, 1e6 * n)
            + case("transformer", "paper-base", n, 0.5 * n, 4e9 * n)
            + case("rnn-width", "paper-base", n, 0.25 * n, 1e9 * n)]
    a = c1_length.analyse(table(data))
    assert a.numbers["speedup_cpu_tiny_n64"] == pytest.approx(4.0)
    assert a.numbers["flop_ratio_cpu_tiny_n64"] == pytest.approx(2.0)
    assert a.numbers["flops_per_s_ratio_cpu_tiny_n64"] == pytest.approx(8.0)  # 4 = 8 / 2
    assert a.numbers["speedup_cpu_paper-base_n64"] == pytest.approx(0.5)
    assert a.numbers["flop_ratio_cpu_paper-base_n64"] == pytest.approx(4.0)
    assert a.numbers["flops_per_s_ratio_cpu_paper-base_n64"] == pytest.approx(2.0)
    assert "The winner changes with model size on cpu at n = 64: the Transformer wins at tiny (4.00×), the RNN at " \
           "paper-base" in a.verdict
    assert "2 CPU threads" in a.verdict and "paper-base (d_model 512, 6+6 layers, h 8), batch 8" in a.verdict
    from reports import figures

    drawn = figures.figures_for(a)
    assert drawn and all("batch 8, cpu, 2 CPU threads, float32" in caption for _, caption, _ in drawn)
    assert all("2 CPU threads" in fig.axes[0].get_title() for _, _, fig in drawn)


def test_depth_slopes_confirm_or_refute_the_claim():
    from reports.analyses import c1_depth

    def d(model, mode, f):
        return rows("depth", "sequential_depth", {(("model", model), ("mode", mode), ("seq_len", n)): f(n)
                                                  for n in (8, 16, 32)}, method="graph", preset="tiny", device="cpu")

    data = (d("rnn-width", "forward", lambda n: 30 * n + 10) + d("transformer", "forward", lambda n: 51)
            + d("transformer", "generate", lambda n: 39 * n + 20))
    a = c1_depth.analyse(table(data))
    assert a.numbers["slope_tiny_rnn-width_forward"] == pytest.approx(30.0)
    assert a.numbers["slope_tiny_transformer_forward"] == pytest.approx(0.0, abs=1e-9)
    assert a.numbers["as_claimed"] == 3 and "3 of 3 agree with the claim" in a.verdict
    wrong = c1_depth.analyse(table(d("transformer", "forward", lambda n: 2 * n)))
    assert "0 of 1 agree" in wrong.verdict and "transformer forward grows contrary to it" in wrong.verdict


def test_c5_finds_where_the_unscaled_softmax_saturates():
    from reports.analyses import c5_scaling

    t = c5_scaling.measure(d_ks=(16, 256, 1024))
    un, sc = t[~t.scaled].set_index("d_k"), t[t.scaled].set_index("d_k")
    assert un.max_probability.is_monotonic_increasing and un.entropy_nats.is_monotonic_decreasing
    assert un.logit_std[1024] == pytest.approx(32, rel=0.1) and sc.logit_std[1024] == pytest.approx(1, rel=0.1)
    assert (sc.max_probability < 0.2).all() and un.max_probability[1024] > 0.9
    a = c5_scaling.analyse()
    first = a.numbers["unscaled_saturates_at_d_k"]
    full = c5_scaling.measure()
    unscaled = full[~full.scaled]
    assert first == unscaled[unscaled.max_probability >= c5_scaling.SATURATED].d_k.min()
    assert f"saturates (mean largest probability ≥ 0.9) from d_k = {first}" in a.verdict


def test_c1_says_when_its_ratio_has_no_measured_spread_and_gives_the_quartile_range_when_it_has():
    def times(samples, quartiles):
        out = []
        for model, (q25, median, q75) in quartiles.items():
            out += [dict(r, q25=q25, q75=q75, iqr=q75 - q25, samples=samples) for r in rows(
                "models", "time", {(("model", model), ("seq_len", n)): median * n / 64 for n in (16, 64)},
                device="cpu", preset="paper-base", batch=8, threads=2)]
        return table(out)

    quartiles = {"transformer": (0.4, 0.5, 0.8), "rnn-width": (0.2, 0.25, 0.3)}
    timed_once = c1_length.analyse(times(1, quartiles)).verdict
    assert "the 0.50× has no measured spread, a time in it resting on 1 timed value " in timed_once
    assert "--rounds R" in timed_once and "quartiles" not in timed_once
    blocks = c1_length.analyse(times(5, quartiles)).verdict
    # the RNN's fastest quartile over the Transformer's slowest, and the other way round
    assert ("between the two times' quartiles (5 or more timed blocks each, seconds apart) the 0.50× spans "
            "0.25×-0.75×, and times measured minutes apart") in blocks
    assert "no measured spread" not in blocks
    unknown = times(5, quartiles)
    unknown.loc[unknown.model == "rnn-width", "samples"] = None  # results that do not say (an asv run without stats)
    assert "the 0.50× has no known spread" in c1_length.analyse(unknown).verdict
    in_rounds = times(5, quartiles).assign(rounds=5)
    assert ("between the two times' quartiles over 5 or more rounds spread over the run, the 0.50× spans 0.25×-0.75×"
            in c1_length.analyse(in_rounds).verdict)


def test_no_winner_is_named_at_a_size_whose_ratio_range_holds_parity():
    def case(model, preset, n, q25, median, q75):
        p = (("model", model), ("preset", preset), ("seq_len", n))
        return [dict(r, q25=q25, q75=q75, iqr=q75 - q25, samples=5, rounds=5)
                for r in rows("models", "time", {p: median}, device="cpu", batch=8, threads=2)]

    def verdict(paper_base_rnn):  # the Transformer wins tiny clearly; paper-base depends on the RNN's spread
        data = [r for n in (16, 64) for r in case("transformer", "tiny", n, 0.9e-3, 1e-3, 1.1e-3)
                + case("rnn-width", "tiny", n, 3.6e-3, 4e-3, 4.4e-3)
                + case("transformer", "paper-base", n, 0.95, 1.0, 1.05)
                + case("rnn-width", "paper-base", n, *paper_base_rnn)]
        return c1_length.analyse(table(data)).verdict

    tied = verdict((0.85, 0.9, 1.0))  # 0.90× as fast, but 0.81×-1.05× between the quartiles
    assert "The winner changes" not in tied
    assert "On cpu at n = 64 the Transformer wins at tiny (Transformer 4.00× as fast)." in tied
    assert ("At paper-base the 0.90× spans 0.81×-1.05× between the two times' quartiles, parity included: no winner "
            "there.") in tied
    def all_tied():
        data = [r for n in (16, 64) for p in ("tiny", "paper-base") for r in
                case("transformer", p, n, 0.9, 1.0, 1.1) + case("rnn-width", p, n, 0.9, 1.0, 1.1)]
        return c1_length.analyse(table(data)).verdict

    assert "On cpu at n = 64 neither model wins at any size measured. At " in all_tied()
    assert "wins at every size" not in all_tied()
    clear = verdict((0.5, 0.55, 0.6))  # 0.55× as fast, 0.48×-0.63×: the RNN wins at paper-base
    assert "The winner changes with model size on cpu at n = 64: the Transformer wins at tiny (4.00×), the RNN at " \
           "paper-base (Transformer 0.55× as fast)." in clear and "no winner" not in clear


def test_the_runtime_settings_a_run_measured_in_are_in_every_verdicts_conditions():
    from reports import columns
    from reports.analyses.base import conditions

    assert columns.facts({"regime": {"threads": 2, "env": {}}})["runtime"] == "default"
    set_ = columns.facts({"regime": {"threads": 2, "env": {"OMP_WAIT_POLICY": "PASSIVE", "MALLOC_ARENA_MAX": "2"}}})
    assert set_["runtime"] == "MALLOC_ARENA_MAX=2, OMP_WAIT_POLICY=PASSIVE"
    assert columns.facts({})["runtime"] is None  # results that do not say (older runs, asv without the sidecar)
    said = table(rows("models", "time", {(("seq_len", 16),): 1.0}, device="cpu", threads=2, runtime="default"))
    assert conditions(said).endswith(", runtime default")
    assert "runtime" not in conditions(table(rows("models", "time", {(("seq_len", 16),): 1.0}, device="cpu")))
    threads = {(("workload", "attention"), ("threads", p)): 1.0 / p for p in (1, 2)}
    scaling = c1_threads.analyse(table(rows("threads", "time", threads, dtype="float32", runtime="default")))
    assert scaling.conditions == "workloads as named in the verdict, 1/2 CPU threads, float32, runtime default"


def test_a_run_without_head_parallel_cases_names_a_command_that_measures_them():
    """The command the head-parallel row suggests is one the command line has, and the folder it names is the one
    that command writes (``pipeline.run_folder``)."""
    import argparse
    import re

    from attention_bench.cli import COMMANDS
    from benchmarks.core import pipeline
    from reports.analyses import c3_parallel

    t = table(rows("models", "time", {(("model", "transformer"), ("seq_len", 16)): 0.01}))
    verdict = c3_parallel.analyse(t).verdict
    command = re.search(r"torchrun --nproc_per_node=N -m (\w+) (\w+)", verdict)
    assert command and command.group(1) == "attention_bench" and command.group(2) in COMMANDS, verdict
    folder = pipeline.run_folder(argparse.Namespace(out=None, machine="m"), "parallel")
    assert folder.replace("m-parallel", "<machine>-parallel") in verdict, (folder, verdict)
