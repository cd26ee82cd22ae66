"""C5: why the scores are divided by sqrt(d_k) (section 3.2.1), computed, not trained.

For queries and keys with unit-variance entries, q·k has variance d_k: without the scale the logits
grow as sqrt(d_k) and the softmax saturates (one key takes all the weight, the entropy falls to 0 and
the softmax's Jacobian, the gradient signal back to the scores, vanishes). With the scale the logits
keep unit variance whatever d_k. ``measure`` draws ``rows`` attention rows over ``keys`` keys per d_k
(seeded) and returns, per d_k and scaling: the mean largest probability, the mean entropy (nats) and
the mean Frobenius norm of the Jacobian diag(p) - p pᵀ.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from .base import Analysis

D_K = (16, 32, 64, 128, 256, 512, 1024)
LABELS = {"max_probability": "mean largest probability", "entropy_nats": "mean entropy (nats)",
          "jacobian_norm": "mean ‖softmax Jacobian‖_F"}
#: a row counts as saturated when its largest probability reaches this
SATURATED = 0.9


def measure(d_ks=D_K, keys: int = 64, rows: int = 256, seed: int = 0) -> pd.DataFrame:
    g = torch.Generator().manual_seed(seed)
    out = []
    for d_k in d_ks:
        q = torch.randn(rows, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(keys, d_k, generator=g, dtype=torch.float64)
        logits = q @ k.T
        for scaled in (True, False):
            p = torch.softmax(logits / math.sqrt(d_k) if scaled else logits, dim=-1)
            entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
            s2 = (p**2).sum(-1)
            jac = torch.sqrt((s2 - 2 * (p**3).sum(-1) + s2**2).clamp_min(0))  # ||diag(p) - p pᵀ||_F
            out.append({"d_k": d_k, "scaled": scaled, "max_probability": p.max(-1).values.mean().item(),
                        "saturated_rows": (p.max(-1).values >= SATURATED).double().mean().item(),
                        "entropy_nats": entropy.mean().item(), "jacobian_norm": jac.mean().item(),
                        "logit_std": (logits / math.sqrt(d_k) if scaled else logits).std().item()})
    return pd.DataFrame(out)


def analyse(keys: int = 64) -> Analysis:
    t = measure(keys=keys)
    a = Analysis("c5_scaling", "Why scores are divided by sqrt(d_k): softmax saturation", "C5", "")
    for metric in ("max_probability", "entropy_nats", "jacobian_norm"):
        a.tables[f"softmax_{metric}"] = t.pivot(index="d_k", columns="scaled", values=metric).rename(
            columns={True: "scaled 1/sqrt(d_k)", False: "unscaled"})
        a.plot(f"softmax_{metric}", xlabel="d_k", ylabel=LABELS[metric],
               title="Softmax of q·k with and without 1/sqrt(d_k)", log_x=True)
        a.units[f"softmax_{metric}"] = "mean over 256 rows of 64 keys"
    un, sc = t[~t.scaled].set_index("d_k"), t[t.scaled].set_index("d_k")
    saturated = un[un.max_probability >= SATURATED]
    first = int(saturated.index.min()) if len(saturated) else None
    a.numbers.update({"uniform_entropy_nats": math.log(keys), "unscaled_saturates_at_d_k": first or float("nan"),
                      "scaled_max_probability_range": float(sc.max_probability.max() - sc.max_probability.min())})
    lo, hi = min(t.d_k), max(t.d_k)
    a.verdict = (f"Random unit-variance queries and keys, {keys} keys per row, d_k = {lo}..{hi} (computed, float64, "
                 f"seeded). Unscaled, the largest softmax probability averages {un.max_probability[lo]:.2f} at "
                 f"d_k = {lo} and {un.max_probability[hi]:.2f} at d_k = {hi}, the entropy falls from "
                 f"{un.entropy_nats[lo]:.2f} to {un.entropy_nats[hi]:.2f} nats (uniform: {math.log(keys):.2f}) and "
                 f"the Jacobian norm from {un.jacobian_norm[lo]:.3f} to {un.jacobian_norm[hi]:.2g}: "
                 + (f"the unscaled softmax saturates (mean largest probability ≥ {SATURATED}) from d_k = {first}. "
                    if first else f"the unscaled softmax does not reach a mean largest probability of {SATURATED}. ")
                 + f"Scaled by 1/sqrt(d_k), the largest probability stays at {sc.max_probability.min():.2f}–"
                   f"{sc.max_probability.max():.2f}, the entropy at {sc.entropy_nats.min():.2f}–"
                   f"{sc.entropy_nats.max():.2f} nats and the Jacobian norm at {sc.jacobian_norm.min():.3f}–"
                   f"{sc.jacobian_norm.max():.3f} for every d_k: the gradient through the softmax does not vanish.")
    a.conditions = f"{keys} keys, 256 rows per d_k, unit-variance q and k, float64, seeded"
    top = un.max_probability[hi]
    a.quoted = ["unscaled_saturates_at_d_k"]
    a.answer = ((f"Unscaled, the softmax saturates from d_k = {first} (largest probability {top:.2f} at {hi}); "
                 if first else f"Unscaled, the largest probability reaches {top:.2f}; ")
                + f"scaled, it stays {sc.max_probability.min():.2f}–{sc.max_probability.max():.2f} at every d_k.")
    return a
