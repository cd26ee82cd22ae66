"""C1 over sequence length: Transformer vs RNN-attention time against n at each model size (the regimes).

Each time ratio is split into its FLOP ratio and its FLOP/s ratio; a model size whose ratio range holds
parity names no winner; the profiles say why (matmul share, launches, sequential depth).
"""

from __future__ import annotations

import math

import pandas as pd

from .base import (
    Analysis,
    conditions,
    fmt_ratio,
    fmt_time,
    gpu_missing,
    held_phrase,
    hold_axes,
    not_measured,
    ok_rows,
    preset_phrase,
    time_curves,
)
from .fits import crossover, fit_power_law
from .profiling import case_table
from .spread import ratio_spread, spread_phrase


def _median(t: pd.DataFrame, metric: str, method: str, keys: list[str], batch) -> pd.Series:
    rows = ok_rows(t, "models", metric, method)
    return rows[rows.batch.isin(batch)].groupby(keys).value.median()


def analyse(t: pd.DataFrame, profiles: pd.DataFrame | None = None) -> Analysis:
    """C1: Transformer vs RNNsearch time against sequence length, forward and training step, at each model
    size measured (the regimes), with each time ratio split into its FLOP ratio and its FLOP/s ratio."""
    rows, held = hold_axes(pd.concat([ok_rows(t, "models", "time"), ok_rows(t, "models", "time", "train_step")]),
                      {"batch": None})
    a = Analysis("c1_length", "Transformer vs RNN-attention over sequence length and model size", "C1", "",
                 missing=gpu_missing(t, "models"))
    if rows.empty:
        return a.without("no models results", not_measured(t, "models", "encoder-decoder"))
    batch = rows.batch.dropna().unique()
    keys = ["device", "preset", "model", "seq_len"]
    flops, rate = (_median(t, m, "forward", keys, batch) for m in ("matmul_flops", "achieved_flops_per_s"))
    fits, sentences, factors = [], [], []
    for (device, preset, method), g in rows.groupby(["device", "preset", "method"]):
        curves, interval = time_curves(g, "seq_len", "model")
        a.tables[f"time_{device}_{preset}_{method}"] = curves
        a.plot(f"time_{device}_{preset}_{method}", xlabel="sequence length n (tokens)", ylabel="time per call (ms)",
               title=f"{method.replace('_', ' ')} time vs n, {preset_phrase(preset)}", scale=1e3, **interval)
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
        if "speedup_low" in r:
            a.interval(f"speedup_{tag}", r["speedup_low"], r["speedup_high"])
        cross = crossover(both.index, both["transformer"], both["rnn-width"])
        where = (f"their times cross at n ≈ {cross:.0f}" if cross is not None else
                 f"no crossover in n = {both.index.min()}..{n_max}")
        sentence = (f"{preset_phrase(preset)}, batch {', '.join(map(str, batch))}, {conditions(sub)}: teacher-forced "
                    f"forward at n = {n_max} takes {fmt_time(r['transformer_s'])} (Transformer) and "
                    f"{fmt_time(r['rnn_width_s'])} (width-matched RNN): the Transformer is {fmt_ratio(r['speedup'])} "
                    f"as fast")
        if "speedup_vs_rnn_params" in r:
            a.numbers[f"speedup_vs_rnn_params_{tag}"] = r["speedup_vs_rnn_params"]
            sentence += f" ({fmt_ratio(r['speedup_vs_rnn_params'])} against the parameter-matched RNN)"
        if "flop_ratio" in r:
            a.numbers[f"flop_ratio_{tag}"] = r["flop_ratio"]
            a.numbers[f"flops_per_s_ratio_{tag}"] = r["flops_per_s_ratio"]
            sentence += (f"; it does {fmt_ratio(r['flop_ratio'])} the RNN's matmul FLOPs at "
                         f"{fmt_ratio(r['flops_per_s_ratio'])} its FLOP/s (time ratio = FLOP/s ratio ÷ FLOP ratio)")
        sentences.append(sentence + spread_phrase(r, r["speedup"]) + f"; {where}.")
    a.tables["factors"] = pd.DataFrame(factors)
    a.tables["exponents"] = pd.DataFrame(fits)
    for f in fits:
        a.numbers[f"exponent_{f['device']}_{f['preset']}_{f['method']}_{f['model']}"] = f["exponent"]
    sentences.extend(_regime_change(a.tables["factors"]))
    if profiles is not None and not profiles.empty:
        sentences.extend(_c1_reasons(profiles))
    a.verdict = " ".join(sentences) + held_phrase(held)
    at_max = [r for r in factors if r["seq_len"] == max(f["seq_len"] for f in factors if f["preset"] == r["preset"]
                                                       and f["device"] == r["device"])]
    a.quoted = [f"speedup_{r['device']}_{r['preset']}_n{r['seq_len']}" for r in at_max]
    a.answer = ("Transformer speed over the width-matched RNN's, teacher-forced forward: "
                + "; ".join(f"{r['preset']} n = {r['seq_len']}: {fmt_ratio(r['speedup'])}{_range(_stated(r, a))}"
                            + ("" if len({x["device"] for x in at_max}) == 1 else f" ({r['device']})") for r in at_max)
                + "." if at_max else "No size measured both models at one n.")
    a.conditions = f"batch {', '.join(map(str, batch))}, {conditions(rows, n=False)}"
    return a



def _stated(row: dict, a: Analysis) -> dict:
    """A factors row with the interval the analysis states for its speed-up (``Analysis.interval``)."""
    key = f"speedup_{row['device']}_{row['preset']}_n{row['seq_len']}"
    if key not in a.intervals:
        return row
    return {**row, "speedup_low": a.intervals[key][0], "speedup_high": a.intervals[key][1]}


def _range(row: dict) -> str:
    """' (range a-b)' between the two times' quartiles, ' (no measured spread)' when a time rests on fewer than
    MIN_SAMPLES values, or nothing when the results do not say."""
    if "speedup_low" in row:
        over = f" over {row['processes']} processes" if row.get("spread_over") == "processes" else ""
        return f" (range {fmt_ratio(row['speedup_low'])}-{fmt_ratio(row['speedup_high'])}{over})"
    return " (no measured spread)" if "samples" in row else ""


def _regime_change(factors: pd.DataFrame) -> list[str]:
    """Where the winner changes with model size: the same n measured at two presets, one won by each model."""
    if factors.empty or factors.preset.nunique() < 2:
        return []
    out = []
    for (device, n), g in factors.groupby(["device", "seq_len"]):
        if g.preset.nunique() < 2:
            continue
        wins = {p: s for p, s in zip(g.preset, g.speedup, strict=True)}
        low, high = (dict(zip(g.preset, g[c], strict=True)) if c in g else {} for c in ("speedup_low", "speedup_high"))
        # a measured range that holds parity names no winner at that size
        even = [p for p in wins if low.get(p, math.nan) <= 1 <= high.get(p, math.nan)]
        tf = [p for p, s in wins.items() if s > 1 and p not in even]
        rnn = [p for p, s in wins.items() if s < 1 and p not in even]
        tie = "".join(f" At {p} the {fmt_ratio(wins[p])} spans {fmt_ratio(low[p])}-{fmt_ratio(high[p])} "
                      "between the two "
                      "times' quartiles, parity included: no winner there." for p in even)
        if tf and rnn:
            out.append(f"The winner changes with model size on {device} at n = {n}: the Transformer wins at "
                       f"{', '.join(tf)} ({', '.join(fmt_ratio(wins[p]) for p in tf)}), the RNN at {', '.join(rnn)} "
                       f"(Transformer {', '.join(fmt_ratio(wins[p]) for p in rnn)} as fast)." + tie)
        elif even and (tf or rnn):
            who = "the Transformer" if tf else "the RNN"
            out.append(f"On {device} at n = {n} {who} wins at {', '.join(tf or rnn)} "
                       f"(Transformer {', '.join(fmt_ratio(wins[p]) for p in tf or rnn)} as fast)." + tie)
        elif even:
            out.append(f"On {device} at n = {n} neither model wins at any size measured." + tie)
        elif len(out) == 0 and n == factors.seq_len.max():
            out.append(f"On {device} at n = {n} the same model wins at every size measured "
                       f"({', '.join(f'{p} {fmt_ratio(s)}' for p, s in wins.items())})." + tie)
    return out


def _c1_reasons(profiles: pd.DataFrame) -> list[str]:
    """Why, from the profiles of the models' forward: time share of the matmul components, launches, depth."""
    out = []
    cases = case_table(profiles)
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

