"""The paper's Table 1: self-attention O(n²·d) against a recurrent layer O(n·d²), exponents and crossover."""

from __future__ import annotations

import pandas as pd

from benchmarks import cases

from .base import Analysis, conditions, devices, not_measured, ok_rows, time_curves
from .fits import crossover, fit_power_law


def analyse(t: pd.DataFrame) -> Analysis:
    """Table 1: exponents of time and FLOPs in n and d for self-attention and recurrent layers, and the
    n < d rule checked on the measured crossover."""
    times, fl = ok_rows(t, "layers", "time"), ok_rows(t, "layers", "matmul_flops")
    a = Analysis("table1", "Self-attention vs recurrent layer, O(n²·d) vs O(n·d²)", "Table 1", "")
    if times.empty:
        return a.without("no layers results", not_measured(t, "layers", "layer"))
    device = devices(times)[0]
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
        tc, interval = time_curves(g, "seq_len", "layer")
        if {"self-attention", "recurrent"} <= set(tc):
            cross.append({"d_model": int(d),
                          # exact, from the FLOP model: an interpolation between grid points would miss it
                          "flops_crossover_n": cases.layer_flop_crossover(int(d)),
                          "time_crossover_n": crossover(tc.index, tc["self-attention"], tc["recurrent"]),
                          "n_range": f"{tc.index.min()}..{tc.index.max()}"})
            a.tables[f"time_d{int(d)}"] = tc
            a.plot(f"time_d{int(d)}", xlabel="sequence length n (tokens)", ylabel="forward time (ms)",
                   title=f"Self-attention vs recurrent layer, d = {int(d)}", scale=1e3, **interval)
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
            f"batch {cases.LAYER_BATCH}, {conditions(times, n=False)}; time grows as "
            f"n^{ex.loc[('time', 'self-attention'), 'exponent_n']:.2f} for self-attention "
            f"(FLOPs n^{ex.loc[('matmul_flops', 'self-attention'), 'exponent_n']:.2f}) and as "
            f"n^{ex.loc[('time', 'recurrent'), 'exponent_n']:.2f} for the recurrent layer "
            f"(FLOPs n^{ex.loc[('matmul_flops', 'recurrent'), 'exponent_n']:.2f}).")
    for c in cross:
        fc_n, tc_n = c["flops_crossover_n"], c["time_crossover_n"]
        a.numbers[f"flops_crossover_d{c['d_model']}"] = fc_n if fc_n is not None else float("nan")
        a.numbers[f"time_crossover_d{c['d_model']}"] = tc_n if tc_n is not None else float("nan")
        fpart = (f"FLOPs cross at n = {fc_n:.0f} (exact, from the FLOP model)" if fc_n is not None else
                 "FLOPs do not cross")
        tpart = (f"measured time crosses at n ≈ {tc_n:.0f} ({tc_n / c['d_model']:.2f}·d)" if tc_n is not None else
                 f"measured time does not cross in n = {c['n_range']}")
        sentences.append(f"d = {c['d_model']}: {fpart}; {tpart}.")
    a.verdict = " ".join(sentences)
    a.answer = _answer(cross)
    a.quoted = [f"{k}_crossover_d{c['d_model']}" for c in cross for k in ("flops", "time")]
    a.conditions = f"batch {cases.LAYER_BATCH}, {cases.LAYER_HEADS} heads, {conditions(times, n=False)}"
    return a


def _answer(cross: list[dict]) -> str:
    """Where FLOPs cross (n = d) and where measured time does, per d, in a line."""
    if not cross:
        return "No d measured both layers at two or more n."
    at = [c for c in cross if c["flops_crossover_n"] is not None]
    if at and all(abs(c["flops_crossover_n"] - c["d_model"]) < 0.5 for c in at):
        flops = f"n = d (d = {', '.join(str(c['d_model']) for c in at)})"
    else:
        flops = ", ".join(f"n = {c['flops_crossover_n']:.0f} at d = {c['d_model']}" for c in at) or "no n measured"
    crossed = [c for c in cross if c["time_crossover_n"] is not None]
    ranges = sorted({c["n_range"] for c in cross})
    if not crossed:
        time = f"measured time does not cross in n = {', '.join(ranges)} at any d"
    else:
        time = "measured time crosses at " + ", ".join(f"n ≈ {c['time_crossover_n']:.0f} at d = {c['d_model']}"
                                                         for c in crossed)
        if len(crossed) < len(cross):
            time += f" and not at d = {', '.join(str(c['d_model']) for c in cross if c not in crossed)}"
    return f"Matmul FLOPs cross at {flops}; {time}."
