"""C1's sequential depth, measured: operators on the critical path of the executed graph against n.

The depth area records each model's executed graph (``benchmarks.opgraph``) per mode and sequence
length. A least-squares line through depth against n gives operators added per token: the claim
predicts a positive slope for the RNN in every mode, zero for a Transformer forward (and its training
step), and a positive slope for greedy generation of n tokens for both models.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .analyses import Analysis, _ok, conditions, not_measured, preset_phrase

#: the slope the claim predicts per (model, mode): True = grows with n, False = flat
EXPECTED = {("transformer", "forward"): False, ("transformer", "train_step"): False,
            ("transformer", "generate"): True}


def expected_growth(model: str, mode: str) -> bool:
    return EXPECTED.get((model, mode), True)  # every RNN mode is sequential in n


def analyse_depth(t: pd.DataFrame) -> Analysis:
    a = Analysis("c1_depth", "Sequential depth of the executed graph against sequence length", "C1", "")
    depth, launches = _ok(t, "depth", "sequential_depth", "graph"), _ok(t, "depth", "op_launches", "graph")
    if depth.empty:
        return a.without("no depth results", not_measured(t, "depth", "sequential-depth"))
    fits, sentences = [], []
    for preset, g in depth.groupby("preset"):
        a.tables[f"depth_{preset}"] = g.pivot_table(index="seq_len", columns=["model", "mode"], values="value")
        l = launches[launches.preset == preset]
        a.tables[f"launches_{preset}"] = l.pivot_table(index="seq_len", columns=["model", "mode"], values="value")
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
    a.conditions = f"batch 1 (the graph does not depend on it), {conditions(depth, n=False)}"
    return a
