"""C1's sequential depth, measured: operators on the critical path of the executed graph against n.

The depth area records each model's executed graph (``benchmarks.opgraph``) per mode and sequence
length. A least-squares line through depth against n gives operators added per token: the claim
predicts a positive slope for the RNN in every mode, zero for a Transformer forward (and its training
step), and a positive slope for greedy generation of n tokens for both models.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .base import Analysis, conditions, not_measured, ok_rows, preset_phrase

#: the slope the claim predicts per (model, mode): True = grows with n, False = flat
EXPECTED = {("transformer", "forward"): False, ("transformer", "train_step"): False,
            ("transformer", "generate"): True}


def expected_growth(model: str, mode: str) -> bool:
    return EXPECTED.get((model, mode), True)  # every RNN mode is sequential in n


def analyse(t: pd.DataFrame) -> Analysis:
    a = Analysis("c1_depth", "Sequential depth of the executed graph against sequence length", "C1", "")
    depth, launches = ok_rows(t, "depth", "sequential_depth", "graph"), ok_rows(t, "depth", "op_launches", "graph")
    if depth.empty:
        return a.without("no depth results", not_measured(t, "depth", "sequential-depth"))
    fits, sentences = [], []
    for preset, g in depth.groupby("preset"):
        a.tables[f"depth_{preset}"] = g.pivot_table(index="seq_len", columns=["model", "mode"], values="value")
        at = launches[launches.preset == preset]
        a.tables[f"launches_{preset}"] = at.pivot_table(index="seq_len", columns=["model", "mode"], values="value")
        for (model, mode), c in g.groupby(["model", "mode"]):
            c = c.groupby("seq_len").value.median()
            if len(c) < 2:
                continue
            slope, intercept = np.polyfit(c.index.astype(float), c.values.astype(float), 1)
            grows = slope > 0.5  # at least one more operator every two tokens
            fits.append({"preset": preset, "model": model, "mode": mode, "slope_ops_per_token": slope,
                         "intercept": intercept, "depth_at_n_min": int(c.iloc[0]), "depth_at_n_max": int(c.iloc[-1]),
                         "n_range": f"{int(c.index.min())}..{int(c.index.max())}", "grows": bool(grows),
                         "as_claimed": bool(grows) == expected_growth(model, mode)})
    f = pd.DataFrame(fits)
    a.tables["slopes"] = f
    for preset in depth.preset.unique():
        a.plot(f"depth_{preset}", table=_labelled(a.tables[f"depth_{preset}"], f, preset),
               xlabel="sequence length n (tokens; generation: n new tokens)", ylabel="operators on the critical path",
               title=f"Sequential depth, {preset}", dashed=_rnn_columns(a.tables[f"depth_{preset}"], f, preset),
               log_x=False, log_y=False,
               legend_size=7)
    a.units = {name: "operators (sequential depth or launches); slopes in operators per token" for name in a.tables}
    for r in fits:
        a.numbers[f"slope_{r['preset']}_{r['model']}_{r['mode']}"] = r["slope_ops_per_token"]
    for preset, g in f.groupby("preset"):
        parts = [f"{r.model} {r.mode.replace('_', ' ')} {r.slope_ops_per_token:.1f} ops/token "
                 f"({r.depth_at_n_min}→{r.depth_at_n_max})" for r in g.itertuples()]
        agree = int(g.as_claimed.sum())
        sentences.append(f"{preset_phrase(preset)}, {conditions(depth[depth.preset == preset])}: fitted slopes of "
                         f"depth in n: " + "; ".join(parts) + f". {agree} of {len(g)} agree with the claim (RNN "
                         f"depth linear in n, Transformer forward and training step flat, generation growing with "
                         f"the output length for both)"
                         + ("" if agree == len(g) else ": " + ", ".join(
                             f"{r.model} {r.mode} {'grows' if r.grows else 'is flat'}" for r in g.itertuples()
                             if not r.as_claimed) + " contrary to it") + ".")
    a.numbers["as_claimed"] = int(f.as_claimed.sum()) if not f.empty else 0
    a.verdict = " ".join(sentences)
    if not f.empty:
        g = f[f.preset == f.preset.iloc[0]]
        a.quoted = [f"slope_{r.preset}_{r.model}_{r.mode}" for r in g.itertuples() if r.mode != "train_step"]
        a.quoted.append("as_claimed")
        a.answer = (f"Critical-path operators added per token ({g.preset.iloc[0]}): "
                    + ", ".join(f"{r.model} {r.mode.replace('_', ' ')} {round(r.slope_ops_per_token)}"
                                for r in g.itertuples() if r.mode != "train_step")
                    + f"; {int(g.as_claimed.sum())} of {len(g)} slopes as claimed.")
    a.conditions = f"batch 1 (the graph does not depend on it), {conditions(depth, n=False)}"
    return a


def _label(slopes: pd.DataFrame, preset: str, model: str, mode: str) -> str:
    """A depth curve's legend: model, mode and its fitted operators per token."""
    fit = slopes[(slopes.preset == preset) & (slopes.model == model) & (slopes["mode"] == mode)] if len(slopes) \
        else slopes
    return f"{model} {mode.replace('_', ' ')}" + (f", {fit.slope_ops_per_token.iloc[0]:.1f}/token" if len(fit) else "")


def _labelled(table: pd.DataFrame, slopes: pd.DataFrame, preset: str) -> pd.DataFrame:
    return table.set_axis([_label(slopes, preset, m, mode) for m, mode in table.columns], axis=1)


def _rnn_columns(table: pd.DataFrame, slopes: pd.DataFrame, preset: str) -> tuple[str, ...]:
    return tuple(_label(slopes, preset, m, mode) for m, mode in table.columns if m != "transformer")
