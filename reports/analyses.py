"""Analyses: pure functions from the tidy table to numbers, tables and a verdict sentence.

Each ``analyse_*`` takes the tidy table of one machine (``reports.tidy``) and returns an ``Analysis``
whose verdict is formatted from its numbers, never written by hand. Plotting (``reports.figures``)
and HTML (``reports.html``) only read the tables an analysis returns. Missing data is reported in
``missing`` and in the verdict, never skipped silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from benchmarks import cases
from benchmarks.measure import MIN_SAMPLES

from . import tidy


@dataclass
class Analysis:
    key: str
    title: str
    claim: str
    verdict: str
    numbers: dict[str, float] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    #: what the numbers were computed on (size, batch, device, threads, dtype), shown under every figure
    conditions: str = ""

    def without(self, missing: str, verdict: str) -> Analysis:
        """This analysis when its data is missing: say so in the verdict and in ``missing``."""
        self.missing.append(missing)
        self.verdict = verdict
        return self


# -- fits -----------------------------------------------------------------------------------------

def fit_power_law(x, y) -> tuple[float, float]:
    """Least-squares fit of log y = log c + k log x; returns (k, c). Needs two distinct x > 0."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if len(np.unique(x[keep])) < 2:
        raise ValueError(f"a power-law fit needs at least two distinct positive x; got {list(x[keep])}")
    k, logc = np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)
    return float(k), float(math.exp(logc))


def crossover(x, a, b) -> float | None:
    """The first x where curve a stops being below (or above) curve b, interpolated in log-log space;
    None if one stays below the other over the whole range. Exact ties count as the crossover."""
    x, a, b = (np.asarray(v, float) for v in (x, a, b))
    order = np.argsort(x)
    x, d = x[order], np.log(a[order]) - np.log(b[order])
    for i in range(len(x)):
        if d[i] == 0:
            return float(x[i])
        if i and np.sign(d[i]) != np.sign(d[i - 1]):
            lx0, lx1 = math.log(x[i - 1]), math.log(x[i])
            return float(math.exp(lx0 + (lx1 - lx0) * d[i - 1] / (d[i - 1] - d[i])))
    return None


def _ok(t: pd.DataFrame, area: str, metric: str, method: str = "forward") -> pd.DataFrame:
    rows = t[(t.area == area) & (t.metric == metric) & (t.method == method) & (t.status == "ok")]
    return rows.dropna(subset=["value"])


def _fix(rows: pd.DataFrame, axes: dict[str, object]) -> tuple[pd.DataFrame, str]:
    """Hold the given axes at one value each, so that a curve never pools different cases: the preferred
    value where measured (None: no preference), else the most measured one (ties: the largest). Returns
    the rows and a phrase naming what was held, for the verdict."""
    held = []
    for axis, prefer in axes.items():
        values = rows[axis].dropna()
        if values.empty:
            continue
        counts = values.value_counts()
        choice = prefer if prefer in counts.index else max(counts.index, key=lambda v: (counts[v], v))
        rows = rows[rows[axis] == choice]
        if len(counts) > 1:
            held.append(f"{axis} {choice}")
    return rows, (f" (at {', '.join(held)})" if held else "")


def _devices(rows: pd.DataFrame) -> list[str]:
    return sorted(rows.device.dropna().unique(), key=lambda d: d != "cpu")


def _fmt_time(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def not_measured(t: pd.DataFrame, area: str, what: str) -> str:
    """Why an analysis has no rows to read: the area was not run at all, or every one of its cases was
    skipped, out of memory or failed (with the commonest reasons); never only "no results"."""
    rows = t[(t.area == area) & t.metric.isin(["time", "sequential_depth"])]
    if rows.empty:
        return f"No {what} results: the {area} area was not run."
    if (rows.status == "ok").any():
        return f"No {what} results: the {area} area ran, but not the cases this analysis reads."
    reasons = rows.groupby(["status", "reason"], dropna=False).size().sort_values(ascending=False)
    told = "; ".join(f"{n} {status}: {reason}" for (status, reason), n in reasons.head(2).items())
    more = f"; {len(reasons) - 2} other reasons" if len(reasons) > 2 else ""
    return f"No {what} results: all {len(rows)} cases of the {area} area were run and none was measured ({told}{more})."


def _gpu_missing(t: pd.DataFrame, area: str) -> list[str]:
    if (t[(t.area == area) & (t.status == "ok")].device == "cuda").any():
        return []
    return [f"no GPU results for {area}: this machine has no CUDA device, or the GPU cases were not run"]


# -- C1: parallelisation --------------------------------------------------------------------------

def preset_phrase(preset: str) -> str:
    """A preset with the sizes that matter: 'tiny (d_model 32, 2+2 layers)'."""
    from transformer import PRESETS

    c = PRESETS.get(preset)
    if c is None:
        return str(preset)
    return f"{preset} (d_model {c.d_model}, {c.num_encoder_layers}+{c.num_decoder_layers} layers, h {c.num_heads})"


def conditions(rows: pd.DataFrame, *, n: bool = True, dtype: str | None = None) -> str:
    """What a verdict was computed on, from its rows: device, threads, dtype and the n range measured."""
    parts = []
    devices = _devices(rows)
    if devices:
        parts.append("/".join(devices))
    threads = rows[rows.device.fillna("cpu") == "cpu"].threads.dropna().unique() if "threads" in rows else []
    if len(threads):
        parts.append(f"{'/'.join(str(int(x)) for x in sorted(threads))} CPU threads")
    dtypes = rows.dtype.dropna().unique() if "dtype" in rows else []
    parts.append("/".join(sorted(map(str, dtypes))) if len(dtypes) else (dtype or "float32"))
    if n and "seq_len" in rows and rows.seq_len.notna().any():
        parts.append(f"n = {int(rows.seq_len.min())}..{int(rows.seq_len.max())}")
    return ", ".join(parts)


def _median(t: pd.DataFrame, metric: str, method: str, keys: list[str], batch) -> pd.Series:
    rows = _ok(t, "models", metric, method)
    return rows[rows.batch.isin(batch)].groupby(keys).value.median()


def analyse_sequence_length(t: pd.DataFrame, profiles: pd.DataFrame | None = None) -> Analysis:
    """C1: Transformer vs RNNsearch time against sequence length, forward and training step, at each model
    size measured (the regimes), with each time ratio split into its FLOP ratio and its FLOP/s ratio."""
    rows, held = _fix(pd.concat([_ok(t, "models", "time"), _ok(t, "models", "time", "train_step")]),
                      {"batch": None})
    a = Analysis("c1_length", "Transformer vs RNN-attention over sequence length and model size", "C1", "",
                 missing=_gpu_missing(t, "models"))
    if rows.empty:
        return a.without("no models results", not_measured(t, "models", "encoder-decoder"))
    batch = rows.batch.dropna().unique()
    keys = ["device", "preset", "model", "seq_len"]
    flops, rate = (_median(t, m, "forward", keys, batch) for m in ("matmul_flops", "achieved_flops_per_s"))
    fits, sentences, factors = [], [], []
    for (device, preset, method), g in rows.groupby(["device", "preset", "method"]):
        curves = g.groupby(["model", "seq_len"]).value.median().unstack("model")
        a.tables[f"time_{device}_{preset}_{method}"] = curves
        for model in curves:
            c = curves[model].dropna()
            if len(c) >= 2:
                k, _ = fit_power_law(c.index, c.values)
                fits.append({"device": device, "preset": preset, "method": method, "model": model, "exponent": k,
                             "n_min": int(c.index.min()), "n_max": int(c.index.max())})
        if method != "forward" or not {"transformer", "rnn-width"} <= set(curves):
            continue
        both = curves.dropna(subset=["transformer", "rnn-width"])
        for n in both.index:
            f_tf, f_rnn = flops.get((device, preset, "transformer", n)), flops.get((device, preset, "rnn-width", n))
            r_tf, r_rnn = rate.get((device, preset, "transformer", n)), rate.get((device, preset, "rnn-width", n))
            row = {"device": device, "preset": preset, "seq_len": int(n),
                   "transformer_s": both.loc[n, "transformer"], "rnn_width_s": both.loc[n, "rnn-width"],
                   "speedup": both.loc[n, "rnn-width"] / both.loc[n, "transformer"]}
            if "rnn-params" in both and both.loc[n, "rnn-params"] == both.loc[n, "rnn-params"]:
                row["speedup_vs_rnn_params"] = both.loc[n, "rnn-params"] / both.loc[n, "transformer"]
            if None not in (f_tf, f_rnn, r_tf, r_rnn):
                row.update(flop_ratio=f_tf / f_rnn, flops_per_s_ratio=r_tf / r_rnn)
            row.update(ratio_spread(g[(g.method == "forward") & (g.seq_len == n)], "transformer", "rnn-width"))
            factors.append(row)
        n_max = both.index.max()
        r = factors[-1]
        sub = g[g.method == "forward"]
        tag = f"{device}_{preset}_n{n_max}"
        a.numbers[f"speedup_{tag}"] = r["speedup"]
        cross = crossover(both.index, both["transformer"], both["rnn-width"])
        where = (f"their times cross at n ≈ {cross:.0f}" if cross is not None else
                 f"no crossover in n = {both.index.min()}..{n_max}")
        sentence = (f"{preset_phrase(preset)}, batch {', '.join(map(str, batch))}, {conditions(sub)}: teacher-forced "
                    f"forward at n = {n_max} takes {_fmt_time(r['transformer_s'])} (Transformer) and "
                    f"{_fmt_time(r['rnn_width_s'])} (width-matched RNN): the Transformer is {_times(r['speedup'])} "
                    f"as fast")
        if "speedup_vs_rnn_params" in r:
            a.numbers[f"speedup_vs_rnn_params_{tag}"] = r["speedup_vs_rnn_params"]
            sentence += f" ({_times(r['speedup_vs_rnn_params'])} against the parameter-matched RNN)"
        if "flop_ratio" in r:
            a.numbers[f"flop_ratio_{tag}"], a.numbers[f"flops_per_s_ratio_{tag}"] = r["flop_ratio"], r["flops_per_s_ratio"]
            sentence += (f"; it does {_times(r['flop_ratio'])} the RNN's matmul FLOPs at {_times(r['flops_per_s_ratio'])} "
                         f"its FLOP/s (time ratio = FLOP/s ratio ÷ FLOP ratio)")
        sentences.append(sentence + spread_phrase(r, r["speedup"]) + f"; {where}.")
    a.tables["factors"] = pd.DataFrame(factors)
    a.tables["exponents"] = pd.DataFrame(fits)
    for f in fits:
        a.numbers[f"exponent_{f['device']}_{f['preset']}_{f['method']}_{f['model']}"] = f["exponent"]
    sentences.extend(_regime_change(a.tables["factors"]))
    if profiles is not None and not profiles.empty:
        sentences.extend(_c1_reasons(profiles))
    a.verdict = " ".join(sentences) + held_phrase(held)
    a.conditions = f"batch {', '.join(map(str, batch))}, {conditions(rows, n=False)}"
    return a


def ratio_spread(rows: pd.DataFrame, first: str, second: str) -> dict:
    """How sure the speed-up time(second) / time(first) is, from the two models' time rows (column ``model``):
    ``samples``, the fewest values either time is over (absent when the results do not say), and when that
    is at least MIN_SAMPLES the range between the two times' quartiles (``speedup_low``, ``speedup_high``)
    and whether they are over rounds spread over the run or over one round's blocks (``spread_over``)."""
    a, b = (rows[rows.model == m] for m in (first, second))
    samples = pd.concat([a.samples, b.samples])
    if a.empty or b.empty or samples.isna().any():
        return {}
    out = {"samples": int(samples.min())}
    if out["samples"] >= MIN_SAMPLES:
        rounds = pd.concat([a.rounds, b.rounds]).dropna()
        out.update(speedup_low=b.q25.median() / a.q75.median(), speedup_high=b.q75.median() / a.q25.median(),
                   spread_over="rounds" if not rounds.empty and rounds.min() >= MIN_SAMPLES else "blocks")
    return out


def spread_phrase(spread: dict, ratio: float) -> str:
    """The clause that says how sure ``ratio`` is (``ratio_spread``): its range between the two times'
    quartiles, said to be over rounds spread over the run or over one round's blocks, seconds apart (which
    on a shared machine understate how far two runs differ); or, when either time is over fewer than
    MIN_SAMPLES values (a slow call timed once: an IQR of 0 that measures nothing), that no spread was
    measured."""
    least = spread.get("samples")
    if least is None:
        return f"; the {_times(ratio)} has no known spread (these results do not say how many values each time is over)"
    least = int(least)
    if least < MIN_SAMPLES:
        return (f"; the {_times(ratio)} has no measured spread, a time in it resting on {least} timed value"
                f"{'s' if least > 1 else ''} (a shared machine's times move from run to run: --rounds R times "
                "each case R times over the run and gives a range)")
    span = f"{_times(spread['speedup_low'])}-{_times(spread['speedup_high'])}"
    if spread["spread_over"] == "rounds":
        return (f"; between the two times' quartiles over {least} or more rounds spread over the run, the "
                f"{_times(ratio)} spans {span}")
    return (f"; between the two times' quartiles ({least} or more timed blocks each, seconds apart) the "
            f"{_times(ratio)} spans {span}, and times measured minutes apart on a shared machine can differ more "
            "(--rounds R times each case R times over the run)")


def unreplicated_note(times: pd.DataFrame, where: str) -> str:
    """A sentence when times a verdict rests on (time rows) are over fewer than MIN_SAMPLES values each
    (a slow call timed once), so that its ratios have no measured spread; else nothing."""
    thin = times[(times.samples < MIN_SAMPLES).fillna(False)]
    if thin.empty:
        return ""
    return (f"{len(thin)} of the {len(times)} times {where} rest on fewer than {MIN_SAMPLES} timed values (as few "
            f"as {int(thin.samples.min())}), so these ratios have no measured spread (--rounds R times each case R "
            "times over the run).")


def held_phrase(held: str) -> str:
    return f" Other axes held{held}." if held else ""


def _times(x: float) -> str:
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def _regime_change(factors: pd.DataFrame) -> list[str]:
    """Where the winner changes with model size: the same n measured at two presets, one won by each model."""
    if factors.empty or factors.preset.nunique() < 2:
        return []
    out = []
    for (device, n), g in factors.groupby(["device", "seq_len"]):
        if g.preset.nunique() < 2:
            continue
        wins = {p: s for p, s in zip(g.preset, g.speedup)}
        low, high = (dict(zip(g.preset, g[c])) if c in g else {} for c in ("speedup_low", "speedup_high"))
        # a measured range that holds parity names no winner at that size
        even = [p for p in wins if low.get(p, math.nan) <= 1 <= high.get(p, math.nan)]
        tf = [p for p, s in wins.items() if s > 1 and p not in even]
        rnn = [p for p, s in wins.items() if s < 1 and p not in even]
        tie = "".join(f" At {p} the {_times(wins[p])} spans {_times(low[p])}-{_times(high[p])} between the two "
                      "times' quartiles, parity included: no winner there." for p in even)
        if tf and rnn:
            out.append(f"The winner changes with model size on {device} at n = {n}: the Transformer wins at "
                       f"{', '.join(tf)} ({', '.join(_times(wins[p]) for p in tf)}), the RNN at {', '.join(rnn)} "
                       f"(Transformer {', '.join(_times(wins[p]) for p in rnn)} as fast)." + tie)
        elif even and (tf or rnn):
            who = "the Transformer" if tf else "the RNN"
            out.append(f"On {device} at n = {n} {who} wins at {', '.join(tf or rnn)} "
                       f"(Transformer {', '.join(_times(wins[p]) for p in tf or rnn)} as fast)." + tie)
        elif even:
            out.append(f"On {device} at n = {n} neither model wins at any size measured." + tie)
        elif len(out) == 0 and n == factors.seq_len.max():
            out.append(f"On {device} at n = {n} the same model wins at every size measured "
                       f"({', '.join(f'{p} {_times(s)}' for p, s in wins.items())})." + tie)
    return out


def _c1_reasons(profiles: pd.DataFrame) -> list[str]:
    """Why, from the profiles of the models' forward: time share of the matmul components, launches, depth."""
    from . import profiling

    out = []
    cases = profiling.case_table(profiles)
    m = cases[(cases.area == "models") & (cases.method == "forward")]
    for preset, g in m.groupby("preset"):
        parts = []
        for _, r in g.sort_values("model").iterrows():
            parts.append(f"{r.model} spends {r.matmul_share:.0%} of its profiled time in matmul components, "
                         f"{r.op_launches} operator launches ({r.unprofiled_s / r.op_launches * 1e6:.0f} µs each on "
                         f"average), sequential depth {r.sequential_depth}")
        out.append(f"Why, from the profiles ({preset}, n = {int(g.seq_len.max())}, batch {int(g.batch.max())}): "
                   + "; ".join(parts) + ".")
    return out


def analyse_generation(t: pd.DataFrame) -> Analysis:
    """C1: teacher-forced forward (parallel over target positions) vs greedy generation (sequential)."""
    fixed = {"preset": "paper-base", "batch": None}
    (fwd, held), (gen, _) = (_fix(_ok(t, "models", "tokens_per_s", m), fixed) for m in ("forward", "generate"))
    a = Analysis("c1_generation", "Parallel teacher forcing vs sequential generation", "C1", "")
    if fwd.empty or gen.empty:
        return a.without("no tokens_per_s for forward and generate", not_measured(t, "models", "generation"))
    keys = ["device", "model", "seq_len"]
    both = (fwd.groupby(keys).value.median().rename("forward_tokens_per_s").to_frame()
            .join(gen.groupby(keys).value.median().rename("generate_tokens_per_s"), how="inner"))
    both["parallel_advantage"] = both.forward_tokens_per_s / both.generate_tokens_per_s
    a.tables["throughput"] = both.reset_index()
    sentences = []
    for device, g in both.reset_index().groupby("device"):
        n = g.seq_len.max()
        at = g[g.seq_len == n].set_index("model")
        for model in at.index:
            a.numbers[f"parallel_advantage_{device}_{model}_n{n}"] = at.loc[model, "parallel_advantage"]
        parts = [f"{m} {at.loc[m, 'parallel_advantage']:.1f}×" for m in at.index]
        at_rows = fwd[fwd.device == device]
        preset = at_rows.preset.dropna().unique()
        sentences.append(f"{', '.join(preset_phrase(p) for p in preset)}, batch "
                         f"{', '.join(map(str, at_rows.batch.dropna().unique()))}, {conditions(at_rows)}, "
                         f"{cases.GENERATE_STEPS} generated tokens{held}; at n = {n}, teacher-forced tokens/s over "
                         f"greedy-generation tokens/s: "
                         + ", ".join(parts) + ".")
        if {"transformer", "rnn-width"} <= set(at.index):
            gen_ratio = at.loc["transformer", "generate_tokens_per_s"] / at.loc["rnn-width", "generate_tokens_per_s"]
            fwd_ratio = at.loc["transformer", "forward_tokens_per_s"] / at.loc["rnn-width", "forward_tokens_per_s"]
            a.numbers[f"transformer_over_rnn_generate_{device}"] = gen_ratio
            a.numbers[f"transformer_over_rnn_forward_{device}"] = fwd_ratio
            sentences.append(f"Transformer/RNN throughput is {fwd_ratio:.2f}× teacher-forced but {gen_ratio:.2f}× "
                             f"in generation, where both models decode one token at a time.")
        times = t[(t.area == "models") & (t.metric == "time") & (t.status == "ok") & (t.device == device)
                  & (t.seq_len == n) & t.method.isin(["forward", "generate"]) & t.model.isin(at.index)
                  & t.preset.isin(preset) & t.batch.isin(at_rows.batch.dropna().unique())]
        sentences.append(unreplicated_note(times, f"at n = {n}"))
    a.verdict = " ".join(x for x in sentences if x)
    a.conditions = (f"{', '.join(preset_phrase(p) for p in fwd.preset.dropna().unique())}, batch "
                    f"{', '.join(map(str, fwd.batch.dropna().unique()))}, {conditions(fwd, n=False)}")
    return a


def analyse_threads(t: pd.DataFrame) -> Analysis:
    """C1: strong scaling on CPU threads: speed-up T(1)/T(p) and parallel efficiency speed-up/p."""
    rows = _ok(t, "threads", "time")
    a = Analysis("c1_threads", "Strong scaling over CPU threads", "C1", "")
    if rows.empty or rows.threads.nunique() < 2:
        return a.without("fewer than two thread counts",
                         "Thread scaling needs at least two thread counts: run the threads area on a multi-core CPU.")
    times = rows.groupby(["workload", "threads"]).value.median().unstack("workload")
    one = times.loc[times.index.min()]
    speedup = one / times
    efficiency = speedup.div(speedup.index.to_series(), axis=0)
    a.tables.update(time=times, speedup=speedup, efficiency=efficiency)
    p = int(times.index.max())
    for w in times:
        a.numbers[f"speedup_{w}_p{p}"] = speedup.loc[p, w]
        a.numbers[f"efficiency_{w}_p{p}"] = efficiency.loc[p, w]
    best, worst = speedup.loc[p].idxmax(), speedup.loc[p].idxmin()
    a.verdict = (f"{_workloads(times.columns)}; on {p} threads, speed-ups over 1 thread: "
                 + ", ".join(f"{w} {speedup.loc[p, w]:.2f}× ({efficiency.loc[p, w]:.0%} efficiency)" for w in times)
                 + f". {best} scales best, {worst} worst.")
    a.conditions = "workloads as named in the verdict, float32, CPU"
    return a


def _workloads(names) -> str:
    """What each thread-scaling workload is (a fixed case of another area)."""
    parts = []
    for w in names:
        area, p = cases.THREAD_WORKLOADS.get(w, (None, {}))
        shown = {k: v for k, v in p.items() if k not in ("device", "dtype", "causal", "out_proj")}
        parts.append(f"{w} ({', '.join(f'{k} {v}' for k, v in shown.items())})")
    return "Workloads, float32 on the CPU: " + "; ".join(parts)


# -- C2: efficiency -------------------------------------------------------------------------------

def analyse_roofline(t: pd.DataFrame) -> Analysis:
    """C2: achieved matmul FLOP/s of equation (1) per backend against the machine's GEMM peak."""
    rows, held = _fix(_ok(t, "attention", "achieved_flops_per_s"), {"causal": False, "d_head": None,
                                                                      "dtype": "float32"})
    a = Analysis("c2_roofline", "Achieved FLOP/s against the measured GEMM peak", "C2", "",
                 missing=_gpu_missing(t, "attention"))
    if rows.empty:
        return a.without("no achieved_flops_per_s", not_measured(t, "attention", "attention FLOP/s"))
    sentences = []
    for device in _devices(rows):
        d = rows[rows.device == device]
        curves = d.groupby(["seq_len", "backend"]).value.median().unstack("backend")
        peaks = t[(t.metric == "gemm_peak_flops_per_s") & (t.device == device) & (t.dtype == "float32")]
        default_peak = peaks[peaks.threads.isna() | (peaks.threads == peaks.threads.max())].value
        peak = float(default_peak.max()) if len(default_peak) else float("nan")
        a.tables[f"achieved_{device}"] = curves
        a.numbers[f"gemm_peak_{device}"] = peak
        parts = []
        for backend in curves:
            best = curves[backend].max()
            a.numbers[f"best_fraction_{device}_{backend}"] = best / peak
            parts.append(f"{backend} peaks at {best / 1e9:.1f} GFLOP/s ({best / peak:.0%}) at n = "
                         f"{curves[backend].idxmax()}")
        sentences.append(f"Equation (1), 8 heads, batch × n = {cases.TOKENS.get(device, '?')} tokens, "
                         f"{conditions(d)}{held} (GEMM peak {peak / 1e9:.1f} GFLOP/s): " + "; ".join(parts) + ".")
    a.verdict = " ".join(sentences)
    a.conditions = (f"8 heads, d_head {'/'.join(str(int(d)) for d in sorted(rows.d_head.dropna().unique()))}, "
                    f"batch × n = {'/'.join(str(cases.TOKENS.get(d, '?')) for d in _devices(rows))} tokens, "
                    f"{conditions(rows, n=False)}")
    return a


# -- C3/C4: heads ---------------------------------------------------------------------------------

#: a correlation at least this strong counts as "time tracks the work" in a verdict
TRACKS = 0.8


def score_bytes(heads: int, dtype_bytes: int = 4) -> int:
    """Bytes of the (batch, h, n, n) score matrix that the batched strategy materialises."""
    s = cases.MULTIHEAD_SHAPE
    return s["batch"] * heads * s["seq_len"] ** 2 * dtype_bytes


def analyse_heads(t: pd.DataFrame, profiles: pd.DataFrame | None = None) -> Analysis:
    """C3/C4: one large attention vs many small heads at fixed d_model: FLOPs, memory and time vs h."""
    flops_rows = _ok(t, "multihead", "matmul_flops")
    times = _ok(t, "multihead", "time")
    a = Analysis("c3_heads", "One large attention vs many small heads", "C3/C4", "",
                 missing=_gpu_missing(t, "multihead"))
    if flops_rows.empty or times.empty:
        return a.without("no multihead results", not_measured(t, "multihead", "multi-head"))
    with_wo = flops_rows[flops_rows.out_proj.astype(bool)]
    f = with_wo.groupby("heads").value.median()
    other = _ok(t, "multihead", "other_flops")
    work = pd.DataFrame({"matmul_flops": f})
    if not other.empty:
        work["other_flops"] = other[other.out_proj.astype(bool)].groupby("heads").value.median()
    work["score_bytes"] = [score_bytes(int(h)) for h in work.index]
    a.tables["work"] = work
    flat = f.max() / f.min()
    a.numbers["matmul_flops_max_over_min"] = flat
    device = _devices(times)[0]
    tt = times[(times.device == device) & times.out_proj.astype(bool)]
    curves = tt.groupby(["heads", "strategy"]).value.median().unstack("strategy")
    a.tables[f"time_{device}"] = curves
    h_lo, h_hi = int(curves.index.min()), int(curves.index.max())
    spreads = (curves.loc[h_hi] / curves.loc[h_lo]).to_dict()
    for s, r in spreads.items():
        a.numbers[f"time_ratio_h{h_hi}_over_h{h_lo}_{s}"] = r
    same = "holds" if flat < 1.0 + 1e-9 else "does not hold"
    s = cases.MULTIHEAD_SHAPE
    sentences = [f"Multi-head attention at batch {s['batch']}, n = {s['seq_len']}, d_model {s['d_model']}, "
                 f"{conditions(tt, n=False)}. Matmul FLOPs vs h: max/min = {flat:.4f} over h = {h_lo}..{h_hi}, so "
                 f"“same FLOPs” {same} for the matmuls."]
    if "other_flops" in work:
        sentences.append(f"Non-matmul work grows {work.other_flops.max() / work.other_flops.min():.1f}× and the "
                         f"score matrix {work.score_bytes.max() / work.score_bytes.min():.0f}× "
                         f"({work.score_bytes.min() / 2**20:.0f} → {work.score_bytes.max() / 2**20:.0f} MiB).")
    sentences.append(f"Yet time on {device} from h = {h_lo} to {h_hi} changes by "
                     + ", ".join(f"{r:.2f}× ({s})" for s, r in spreads.items()) + ".")
    if "batched" in curves and "other_flops" in work and len(curves) > 2:
        # why: does the batched strategy's time track the work that grows with h (the h·n² scores)?
        joined = pd.concat([curves["batched"], work.score_bytes], axis=1).dropna()
        with np.errstate(invalid="ignore", divide="ignore"):  # a flat time has no correlation: r is nan
            r = float(np.corrcoef(np.log(joined.iloc[:, 0]), np.log(joined.score_bytes))[0, 1])
        a.numbers["corr_log_time_log_score_bytes_batched"] = r
        if r >= TRACKS:
            sentences.append(f"Why: the batched strategy's time tracks the work that grows with h, the h·n² score "
                             f"matrix and its softmax, not the flat matmuls (correlation of log time with log "
                             f"score-matrix size r = {r:.2f}).")
        else:
            sentences.append(f"The batched strategy's time does not track the score-matrix size (r = {r:.2f}), so "
                             f"these measurements do not say why it changes with h.")
        least = min(spreads, key=lambda k: abs(math.log(spreads[k])))
        a.numbers["least_changing_strategy_ratio"] = spreads[least]
        sentences.append(f"The strategy whose time changes least with h is {least} ({spreads[least]:.2f}×).")
    if profiles is not None and not profiles.empty:
        from . import profiling

        explained, by_component = profiling.heads_explained(profiles)
        if explained:
            a.tables["components_vs_heads"] = by_component
            sentences.append("Component by component, from the profiles: " + " ".join(explained))
    wo = times[(times.device == device) & (times.strategy == "batched")]
    if wo.out_proj.nunique() == 2:
        w = wo.groupby(["heads", "out_proj"]).value.median().unstack("out_proj")
        w.columns = ["without W_O" if not c else "with W_O" for c in w.columns]
        w["W_O cost"] = w["with W_O"] / w["without W_O"]
        a.tables[f"wo_{device}"] = w
        a.numbers["wo_time_ratio_median"] = float(w["W_O cost"].median())
        fw = flops_rows.groupby("out_proj").value.median()
        a.numbers["wo_flops_ratio"] = fw[True] / fw[False]
        sentences.append(f"W_O adds {fw[True] / fw[False] - 1:.0%} of the matmul FLOPs and "
                         f"{w['W_O cost'].median() - 1:.0%} of the time (median over h, batched).")
    a.verdict = " ".join(sentences)
    a.conditions = f"batch {s['batch']}, n {s['seq_len']}, d_model {s['d_model']}, {conditions(tt, n=False)}"
    return a


# -- Table 1 --------------------------------------------------------------------------------------

def analyse_table1(t: pd.DataFrame) -> Analysis:
    """Table 1: exponents of time and FLOPs in n and d for self-attention and recurrent layers, and the
    n < d rule checked on the measured crossover."""
    times, fl = _ok(t, "layers", "time"), _ok(t, "layers", "matmul_flops")
    a = Analysis("table1", "Self-attention vs recurrent layer, O(n²·d) vs O(n·d²)", "Table 1", "")
    if times.empty:
        return a.without("no layers results", not_measured(t, "layers", "layer"))
    device = _devices(times)[0]
    times, fl = times[times.device == device], fl[fl.device == device]
    fits = []
    for metric, rows in (("time", times), ("matmul_flops", fl)):
        for layer, g in rows.groupby("layer"):
            d_max, n_max = g.d_model.max(), g.seq_len.max()
            by_n = g[g.d_model == d_max].groupby("seq_len").value.median()
            by_d = g[g.seq_len == n_max].groupby("d_model").value.median()
            row = {"metric": metric, "layer": layer, "d_fixed": int(d_max), "n_fixed": int(n_max)}
            row["exponent_n"] = fit_power_law(by_n.index, by_n.values)[0] if len(by_n) > 1 else float("nan")
            row["exponent_d"] = fit_power_law(by_d.index, by_d.values)[0] if len(by_d) > 1 else float("nan")
            fits.append(row)
    a.tables["exponents"] = pd.DataFrame(fits)
    a.tables["exponents"]["paper"] = a.tables["exponents"].layer.map(
        {"self-attention": "O(n²·d)", "recurrent": "O(n·d²)"})
    cross = []
    for d, g in times.groupby("d_model"):
        tc = g.groupby(["seq_len", "layer"]).value.median().unstack("layer")
        fc = fl[fl.d_model == d].groupby(["seq_len", "layer"]).value.median().unstack("layer")
        if {"self-attention", "recurrent"} <= set(tc):
            cross.append({"d_model": int(d),
                          "flops_crossover_n": crossover(fc.index, fc["self-attention"], fc["recurrent"]),
                          "time_crossover_n": crossover(tc.index, tc["self-attention"], tc["recurrent"]),
                          "n_range": f"{tc.index.min()}..{tc.index.max()}"})
            a.tables[f"time_d{int(d)}"] = tc
    cross_t = pd.DataFrame(cross)
    a.tables["crossover"] = cross_t
    for f in fits:
        a.numbers[f"{f['metric']}_exponent_n_{f['layer']}"] = f["exponent_n"]
        a.numbers[f"{f['metric']}_exponent_d_{f['layer']}"] = f["exponent_d"]
    sentences = []
    ex = a.tables["exponents"].set_index(["metric", "layer"])
    if ("time", "self-attention") in ex.index and ("time", "recurrent") in ex.index:
        sentences.append(
            f"A self-attention layer ({cases.LAYER_HEADS} heads, fused SDPA, with projections) against a GRU layer, "
            f"batch {cases.LAYER_BATCH}, {conditions(times, n=False)}; time grows as n^{ex.loc[('time', 'self-attention'), 'exponent_n']:.2f} for self-attention "
            f"(FLOPs n^{ex.loc[('matmul_flops', 'self-attention'), 'exponent_n']:.2f}) and as "
            f"n^{ex.loc[('time', 'recurrent'), 'exponent_n']:.2f} for the recurrent layer "
            f"(FLOPs n^{ex.loc[('matmul_flops', 'recurrent'), 'exponent_n']:.2f}).")
    for c in cross:
        fc_n, tc_n = c["flops_crossover_n"], c["time_crossover_n"]
        a.numbers[f"flops_crossover_d{c['d_model']}"] = fc_n if fc_n is not None else float("nan")
        a.numbers[f"time_crossover_d{c['d_model']}"] = tc_n if tc_n is not None else float("nan")
        fpart = f"FLOPs cross at n = {fc_n:.0f}" if fc_n is not None else f"FLOPs do not cross in n = {c['n_range']}"
        tpart = (f"measured time crosses at n ≈ {tc_n:.0f} ({tc_n / c['d_model']:.2f}·d)" if tc_n is not None else
                 f"measured time does not cross in n = {c['n_range']}")
        sentences.append(f"d = {c['d_model']}: {fpart}; {tpart}.")
    a.verdict = " ".join(sentences)
    a.conditions = f"batch {cases.LAYER_BATCH}, {cases.LAYER_HEADS} heads, {conditions(times, n=False)}"
    return a


# -- hardware comparison --------------------------------------------------------------------------

def analyse_hardware(t: pd.DataFrame) -> Analysis:
    """The same cases on several machines as time ratios against the first machine, raw and normalised by
    each machine's GEMM peak (a ratio near 1 after normalising means the gap is the GEMM peak's gap)."""
    machines = list(dict.fromkeys(t.machine.dropna()))
    a = Analysis("hardware", "The same cases on several machines", "Hardware", "")
    if len(machines) < 2:
        return a.without("a second machine's results", (
            f"Only one machine ({machines[0] if machines else 'none'}) in these results. To compare, measure on "
            f"another machine (python -m reports --machine <name>, or python -m benchmarks.runner --out "
            f"results/runs/<name>) and build the report from both folders: "
            f"python -m reports build results/runs/<a> results/runs/<b>."))
    base = machines[0]
    times = t[(t.metric == "time") & (t.status == "ok") & (t.area != "gemm")].dropna(subset=["value"])
    times = times.assign(device=times.device.fillna("cpu"), run_threads=times.threads)
    # the thread count a case ran on is the machine's, except where it is the case's own axis
    times.loc[times.area != "threads", "threads"] = pd.NA
    times["peak"] = _peaks_for(t, times)
    params = [c for c in tidy.PARAMS if c in times and times[c].notna().any()]
    key = ["area", "method", *params]
    grouped = times.groupby(key + ["machine"], dropna=False)
    wide = grouped.value.median().unstack("machine").dropna(subset=machines, how="any")
    peak = grouped.peak.first().unstack("machine").reindex(wide.index)
    if wide.empty:
        return a.without("common cases", f"The machines {machines} share no measured case; run the same grid on each.")
    rows = []
    for m in machines[1:]:
        raw = wide[base] / wide[m]  # > 1: m is faster
        # the speed-up divided by the ratio of the GEMM peaks each case ran under: 1.0 means "exactly as much
        # faster as its GEMM peak"
        per_peak = raw * peak[base] / peak[m]
        rows.append({"machine": m, "baseline": base, "cases": len(raw), "median_speedup": float(raw.median()),
                     "min_speedup": float(raw.min()), "max_speedup": float(raw.max()),
                     "median_speedup_per_peak": float(per_peak.median())})
        a.numbers[f"median_speedup_{m}"] = float(raw.median())
        a.numbers[f"median_speedup_per_peak_{m}"] = float(per_peak.median())
    a.tables["speedup"] = pd.DataFrame(rows)
    a.tables["times"] = wide
    a.verdict = " ".join(f"{r['machine']} runs the {r['cases']} common cases {r['median_speedup']:.2f}× as fast as "
                         f"{base} (median; {r['min_speedup']:.2f}–{r['max_speedup']:.2f}×), "
                         f"{r['median_speedup_per_peak']:.2f}× after dividing by the ratio of the machines' GEMM "
                         f"peaks." for r in rows)
    return a


def _peaks_for(t: pd.DataFrame, times: pd.DataFrame) -> pd.Series:
    """For each timed row, its machine's float32 GEMM peak on its device at the thread count it ran on
    (the best over thread counts where that one was not calibrated; GPUs have one peak)."""
    p = t[(t.metric == "gemm_peak_flops_per_s") & (t.dtype == "float32")]
    p = p.assign(device=p.device.fillna("cpu"))
    exact = p.groupby(["machine", "device", "threads"]).value.max()
    best = p.groupby(["machine", "device"]).value.max()
    out = []
    for m, d, n in zip(times.machine, times.device, times.run_threads):
        key = (m, d, n)
        out.append(exact[key] if d == "cpu" and not pd.isna(n) and key in exact.index else best.get((m, d), np.nan))
    return pd.Series(out, index=times.index, dtype=float)


def case_columns(rows: pd.DataFrame, *extra: str) -> pd.DataFrame:
    """Each row's machine, area, method, the axes any row has, and ``extra``: a table of cases."""
    axes = [c for c in tidy.PARAMS if rows[c].notna().any()]
    return rows[["machine", "area", "method", *axes, *extra]].reset_index(drop=True)


def memory_limits(t: pd.DataFrame) -> pd.DataFrame:
    """Where memory ran out: every out-of-memory case with its parameters, next to the largest sequence
    length measured on the same machine, area and device (the limit lies between the two)."""
    timed = t[t.metric == "time"]
    oom = timed[timed.status == "oom"]
    if oom.empty:
        return pd.DataFrame()
    ok = timed[timed.status == "ok"]
    largest = ok.groupby(["machine", "area", ok.device.fillna("cpu")]).seq_len.max()
    fits = [largest.get((m, a, d if isinstance(d, str) else "cpu"), pd.NA)
            for m, a, d in zip(oom.machine, oom.area, oom.device)]
    return case_columns(oom.assign(largest_n_measured=fits), "largest_n_measured", "reason")


def analyses_in_order():
    """Every per-machine analysis, in the report's order; those marked True also read the profiles."""
    from . import depth, parallel, profiling, softmax_scale

    return [(analyse_sequence_length, True), (analyse_generation, False), (depth.analyse_depth, False),
            (analyse_threads, False), (analyse_roofline, False), (analyse_heads, True), (parallel.analyse_parallel, False),
            (lambda t: softmax_scale.analyse_softmax_scaling(), False), (analyse_table1, False),
            (lambda t, p: profiling.analyse_profiles(p), True)]


def run_all(t: pd.DataFrame, machine: str | None = None, profiles: pd.DataFrame | None = None) -> list[Analysis]:
    """Every per-machine analysis on ``machine`` (default: the first in the table), then the comparison.
    ``profiles`` is ``reports.profiling.table`` of that machine's profile records (empty: none)."""
    machines = list(dict.fromkeys(t.machine.dropna()))
    if machine is not None and machine not in machines:
        raise ValueError(f"unknown machine {machine!r}; the results have {machines}")
    one = latest(t[t.machine == (machine or (machines[0] if machines else None))])
    profiles = pd.DataFrame() if profiles is None else profiles
    out = [f(one, profiles) if with_profiles else f(one) for f, with_profiles in analyses_in_order()]
    return out + [analyse_hardware(pd.concat([latest(t[t.machine == m]) for m in machines]) if machines else t)]


def run_key(t: pd.DataFrame) -> pd.Series:
    """Each row's run: the ``run`` column (a runner folder, or an asv commit and environment); tables built
    without it fall back to (commit, environment)."""
    if "run" in t and t.run.notna().all():
        return t.run
    return t.commit.astype(object).fillna("no commit").astype(str) + " " + t.env.astype(object).fillna("").astype(str)


def latest_run(t: pd.DataFrame):
    """The label of the run measured last (by its latest case), or None for an empty table. A run without
    a commit is still a run: it is told apart by its folder, never dropped."""
    if t.empty:
        return None
    dates = t.date.groupby(run_key(t), sort=False, dropna=False).max()
    return dates.index[-1] if dates.isna().all() else dates.idxmax()


def latest(t: pd.DataFrame) -> pd.DataFrame:
    """The rows of one machine's latest run. asv's results hold every commit, and two runner folders of one
    machine (say a quick and a default grid) are two runs: an analysis must not pool them."""
    run = latest_run(t)
    return t if run is None else t[run_key(t) == run]


def one_machine_per_run(t: pd.DataFrame) -> pd.DataFrame:
    """The table with each run as its own machine: a machine with several runs is relabelled
    "machine [run]", so that a comparison sets them side by side instead of keeping only the latest."""
    keys = run_key(t)
    several = t.groupby("machine").apply(lambda g: keys[g.index].nunique() > 1, include_groups=False)
    relabel = t.machine.map(several).fillna(False).astype(bool)
    return t.assign(machine=t.machine.where(~relabel, t.machine + " [" + keys + "]"))
