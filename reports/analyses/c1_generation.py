"""C1 in generation: teacher forcing (parallel over target positions) against greedy generation (sequential)."""

from __future__ import annotations

import pandas as pd

from benchmarks import cases

from .base import Analysis, conditions, devices, first, hold_axes, not_measured, ok_rows, preset_phrase
from .spread import ratio_interval, unreplicated_note


def analyse(t: pd.DataFrame) -> Analysis:
    """C1: teacher-forced forward (parallel over target positions) vs greedy generation (sequential)."""
    fixed = {"preset": "paper-base", "batch": None}
    (fwd, held), (gen, _) = (hold_axes(ok_rows(t, "models", "tokens_per_s", m), fixed) for m in ("forward", "generate"))
    a = Analysis("c1_generation", "Parallel teacher forcing vs sequential generation", "C1", "")
    if fwd.empty or gen.empty:
        return a.without("no tokens_per_s for forward and generate", not_measured(t, "models", "generation"))
    keys = ["device", "model", "seq_len"]
    both = (fwd.groupby(keys).value.median().rename("forward_tokens_per_s").to_frame()
            .join(gen.groupby(keys).value.median().rename("generate_tokens_per_s"), how="inner"))
    both["parallel_advantage"] = both.forward_tokens_per_s / both.generate_tokens_per_s
    a.tables["throughput"] = both.reset_index()
    lines = {}
    for (device, model), g in a.tables["throughput"].groupby(["device", "model"]):
        g = g.set_index("seq_len")
        lines[f"{model} teacher-forced ({device})"] = g.forward_tokens_per_s
        lines[f"{model} greedy ({device})"] = g.generate_tokens_per_s
    a.plot("throughput", table=pd.DataFrame(lines), xlabel="sequence length n (tokens)", ylabel="throughput (tokens/s)",
           title="Teacher forcing (parallel) vs greedy generation (sequential)", log_x=True, log_y=True,
           dashed=tuple(k for k in lines if " greedy " in k), legend_size=7)
    sentences = []
    for device, g in both.reset_index().groupby("device"):
        n = g.seq_len.max()
        at = g[g.seq_len == n].set_index("model")
        spans = _advantage_intervals(fwd, gen, device, n)
        for model in at.index:
            a.numbers[f"parallel_advantage_{device}_{model}_n{n}"] = at.loc[model, "parallel_advantage"]
            if model in spans:
                a.interval(f"parallel_advantage_{device}_{model}_n{n}", *spans[model])
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
    at = a.tables["throughput"]
    at = at[(at.device == first(devices(at))) & (at.seq_len == at.seq_len.max())].set_index("model")
    n = int(at.seq_len.max())
    spans = {m: a.intervals.get(f"parallel_advantage_{first(devices(at))}_{m}_n{n}") for m in at.index}
    a.quoted = [f"parallel_advantage_{first(devices(at))}_{m}_n{n}" for m in at.index]
    a.answer = (f"At n = {n}, teacher forcing gives "
                + ", ".join(f"{at.loc[m, 'parallel_advantage']:.1f}× ({m}"
                            + (f", {spans[m][0]:.1f}-{spans[m][1]:.1f}" if spans[m] else "") + ")" for m in at.index)
                + " the tokens/s of greedy generation.")
    a.conditions = (f"{', '.join(preset_phrase(p) for p in fwd.preset.dropna().unique())}, batch "
                    f"{', '.join(map(str, fwd.batch.dropna().unique()))}, {conditions(fwd, n=False)}")
    return a


def _advantage_intervals(fwd: pd.DataFrame, gen: pd.DataFrame, device: str, n: int) -> dict[str, tuple]:
    """Per model, where a rerun's teacher-forced over generated tokens/s lands (``ratio_interval`` of the two
    rates' intervals), for the models whose both rates have one."""
    out = {}
    for model in fwd[(fwd.device == device) & (fwd.seq_len == n)].model.unique():
        rates = [g[(g.device == device) & (g.seq_len == n) & (g.model == model)] for g in (gen, fwd)]
        if all(not r.empty and r.low.notna().all() for r in rates):
            span = ratio_interval(*((r.value.median(), r.low.median(), r.high.median()) for r in rates))
            if span[0] == span[0]:
                out[model] = span
    return out
