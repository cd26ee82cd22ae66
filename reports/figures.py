"""Figures: matplotlib drawings of the figures each analysis declares (nothing here computes a result).

``figures_for(analysis)`` draws an analysis's ``Figure`` specs (``reports.analyses.base.Figure``) and
returns (file stem, caption, matplotlib figure) triples; ``memory_figure`` draws one profile's memory
timeline; ``save`` writes PNGs. Axes carry units; log scales where the data spans decades.
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")  # no display: before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .analyses.base import Analysis, Figure  # noqa: E402

#: inches at 130 dpi: 1040 x 585 px, readable on the page at its full width
SIZE = (8.0, 4.5)
DPI = 130
#: laid out once, as each figure is saved (after its last title), not after every change
LAYOUT = "tight"


def _spans_decades(values) -> bool:
    v = np.asarray(pd.Series(values).dropna(), float)
    v = v[v > 0]
    return len(v) > 1 and v.max() / v.min() >= 10


def _finish(fig, ax, spec: Figure):
    ax.set_xlabel(spec.xlabel)
    ax.set_ylabel(spec.ylabel)
    ax.set_title(spec.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=spec.legend_size)
    return fig


def _lines(spec: Figure):
    """Each column a line against the index; dashed columns are the sequential counterpart of a solid one."""
    fig, ax = plt.subplots(figsize=SIZE, layout=LAYOUT)
    table = spec.table
    for column in table.columns:
        s = table[column].dropna()
        dashed = column in spec.dashed
        line, = ax.plot(s.index, s.values * spec.scale, marker="x" if dashed else "o",
                        linestyle="--" if dashed else "-", label=str(column))
        if spec.low is not None and column in spec.low:  # each point's interval: where a rerun lands
            low, high = (spec.low[column].reindex(s.index), spec.high[column].reindex(s.index))
            shown = low.notna() & high.notna()
            if shown.any():
                ax.errorbar(s.index[shown], s.values[shown] * spec.scale,
                            yerr=[((s - low)[shown].clip(lower=0) * spec.scale).to_numpy(),
                                  ((high - s)[shown].clip(lower=0) * spec.scale).to_numpy()],
                            fmt="none", ecolor=line.get_color(), capsize=3, linewidth=1)
    if spec.hline is not None:
        ax.axhline(spec.hline[0] * spec.scale, color="black", linestyle="--", linewidth=1, label=spec.hline[1])
    if spec.ideal is not None:
        p = np.asarray(sorted(table.index), float)
        ax.plot(p, p if spec.ideal == "identity" else np.ones_like(p), color="grey", linestyle=":", label="ideal")
    if spec.log_x if spec.log_x is not None else _spans_decades(table.index):
        ax.set_xscale("log", base=2)
    if spec.log_y if spec.log_y is not None else _spans_decades(table.to_numpy().ravel()):
        ax.set_yscale("log")
    return _finish(fig, ax, spec)


def _bars(spec: Figure):
    """Each column a bar per row, side by side."""
    fig, ax = plt.subplots(figsize=SIZE, layout=LAYOUT)
    table, width = spec.table, 0.8 / len(spec.table.columns)
    x = np.arange(len(table))
    for i, column in enumerate(table.columns):
        ax.bar(x + (i - (len(table.columns) - 1) / 2) * width, table[column] * spec.scale, width, label=str(column))
    ax.set_xticks(x, table.index)
    if spec.hline is not None:
        ax.axhline(spec.hline[0] * spec.scale, color="black", linewidth=1)
    return _finish(fig, ax, spec)


def _shares(spec: Figure):
    """One horizontal bar per row (a profiled case), its columns (components) stacked by share."""
    table = spec.table
    order = table.sum().sort_values(ascending=False).index
    fig, ax = plt.subplots(figsize=(SIZE[0] * 1.25, 0.45 * len(table) + 1.8), layout=LAYOUT)
    left = np.zeros(len(table))
    colors = plt.get_cmap("tab20")
    for i, comp in enumerate(order):
        values = table[comp].to_numpy()
        ax.barh(range(len(table)), values, left=left, color=colors(i % 20), label=comp)
        left += values
    ax.set_yticks(range(len(table)), table.index, fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_xlabel(spec.xlabel)
    ax.set_title(spec.title)
    ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(table) < 4 else -0.12))
    return fig


def _scatter(spec: Figure):
    """Each row a point (``x``, ``y``), one marker per ``group``, on log-log axes; ``ideal`` "identity" draws
    y = x; ``roof`` draws the roofline's two ceilings, min(peak, bandwidth x intensity)."""
    fig, ax = plt.subplots(figsize=SIZE, layout=LAYOUT)
    table = spec.table
    for i, (group, g) in enumerate(table.groupby("group", sort=True)):
        ax.scatter(g.x, g.y * spec.scale, s=18, marker="os^Dvx*P"[i % 8], label=str(group), alpha=0.8)
    lo, hi = float(table.x.min()), float(table.x.max())
    if spec.ideal == "identity":
        low, high = (min(lo, table.y.min() * spec.scale), max(hi, table.y.max() * spec.scale))
        ax.plot([low, high], [low, high], color="grey", linestyle=":", label="predicted = measured")
    if spec.roof is not None:
        peak, bandwidth = spec.roof
        x = np.geomspace(min(lo, peak / bandwidth) / 2, max(hi, peak / bandwidth) * 2, 200)
        ax.plot(x, np.minimum(peak, bandwidth * x) * spec.scale, color="black", linewidth=1.2,
                label=f"ceilings: peak {peak / 1e9:.3g} GFLOP/s, {bandwidth / 1e9:.3g} GB/s x intensity")
    ax.set_xscale("log")
    ax.set_yscale("log")
    return _finish(fig, ax, spec)


DRAW = {"lines": _lines, "bars": _bars, "shares": _shares, "scatter": _scatter}


def figures_for(a: Analysis) -> list[tuple[str, str, plt.Figure]]:
    """Every figure an analysis declares; each names the conditions its numbers were computed on, in its
    title and its caption."""
    out = []
    for spec in a.figures:
        if spec.kind not in DRAW:
            raise ValueError(f"{a.key}: figure {spec.name!r} has kind {spec.kind!r}; allowed: {', '.join(DRAW)}")
        fig = DRAW[spec.kind](spec)
        caption = f"{a.title}: {spec.name.replace('_', ' ')}"
        if a.conditions:
            ax = fig.axes[0]
            ax.set_title(f"{ax.get_title()}\n{a.conditions}", fontsize=9)
            caption += f" ({a.conditions})"
        out.append((f"{a.key}_{spec.name}", caption, fig))
    return out


def memory_figure(profile: dict):
    """Bytes allocated during one profiled call over time, and what holds them at the peak."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 2]}, layout=LAYOUT)
    timeline = np.asarray(profile["memory_timeline"] or [[0.0, 0]], float)
    ax.step(timeline[:, 0] * 1e3, timeline[:, 1] / 2**20, where="post")
    ax.set_xlabel("time in the call (ms)")
    ax.set_ylabel("allocated since the call began (MiB)")
    ax.set_title(f"peak {profile['peak_bytes'] / 2**20:.1f} MiB")
    ax.grid(True, alpha=0.3)
    held = sorted(profile["memory_by_component"].items(), key=lambda kv: kv[1])
    bx.barh([k for k, _ in held], [v / 2**20 for _, v in held])
    bx.set_xlabel("MiB held at the peak")
    bx.set_title("what holds it (allocating component)")
    bx.tick_params(axis="y", labelsize=8)
    fig.suptitle(_case_title(profile), fontsize=9)
    return fig


def _case_title(profile: dict) -> str:
    params = ", ".join(f"{k} {v}" for k, v in profile["params"].items() if k != "device")
    return f"{profile['area']} {profile['method']} ({params}) on {profile['device']}"


def save(figures, folder: str) -> list[dict]:
    """Write each figure as PNG into ``folder``; returns [{file, caption}] for the HTML."""
    os.makedirs(folder, exist_ok=True)
    saved = []
    for stem, caption, fig in figures:
        path = os.path.join(folder, f"{stem}.png")
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
        saved.append({"file": os.path.basename(path), "caption": caption})
    return saved
