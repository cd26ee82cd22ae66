"""Figures: matplotlib plots of the tables an analysis returns (nothing here computes a result).

``figures_for(analysis)`` returns (file stem, caption, Figure) triples; ``save`` writes them as PNG.
Axes carry units; log scales where the data spans decades.
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks import cases  # noqa: E402

from .analyses import Analysis, preset_phrase  # noqa: E402

SIZE = (6.4, 4.0)
HEADS_AXIS = f"heads h (d_model fixed at {cases.MULTIHEAD_SHAPE['d_model']})"


def _spans_decades(values) -> bool:
    v = np.asarray(pd.Series(values).dropna(), float)
    v = v[v > 0]
    return len(v) > 1 and v.max() / v.min() >= 10


def _finish(fig, ax, xlabel: str, ylabel: str, title: str, legend_size: int = 8):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


def _lines(table: pd.DataFrame, xlabel: str, ylabel: str, title: str, scale: float = 1.0, marker="o",
           hline: tuple[float, str] | None = None):
    fig, ax = plt.subplots(figsize=SIZE)
    for column in table.columns:
        s = table[column].dropna()
        ax.plot(s.index, s.values * scale, marker=marker, label=str(column))
    if hline is not None:
        ax.axhline(hline[0] * scale, color="black", linestyle="--", linewidth=1, label=hline[1])
    if _spans_decades(table.index):
        ax.set_xscale("log", base=2)
    if _spans_decades(table.to_numpy().ravel()):
        ax.set_yscale("log")
    return _finish(fig, ax, xlabel, ylabel, title)


def figures_for(a: Analysis) -> list[tuple[str, str, plt.Figure]]:
    """Every figure of an analysis; each names the conditions its numbers were computed on, in its title
    and its caption."""
    out = []
    for name, table in a.tables.items():
        fig = _figure(a, name, table)
        if fig is None:
            continue
        caption = f"{a.title}: {name.replace('_', ' ')}"
        if a.conditions:
            ax = fig.axes[0]
            ax.set_title(f"{ax.get_title()}\n{a.conditions}", fontsize=8)
            fig.tight_layout()
            caption += f" ({a.conditions})"
        out.append((f"{a.key}_{name}", caption, fig))
    return out


def _figure(a: Analysis, name: str, table: pd.DataFrame):
    if table.empty:
        return None
    if a.key == "c1_length" and name.startswith("time_"):
        _, device, preset, method = name.split("_", 3)
        return _lines(table, "sequence length n (tokens)", "time per call (ms)",
                      f"{method.replace('_', ' ')} time vs n, {preset_phrase(preset)}", 1e3)
    if a.key == "c1_depth" and name.startswith("depth_"):
        slopes = a.tables.get("slopes", pd.DataFrame())
        fig, ax = plt.subplots(figsize=SIZE)
        preset = name.removeprefix("depth_")
        for (model, mode) in table.columns:
            s = table[(model, mode)].dropna()
            fit = slopes[(slopes.preset == preset) & (slopes.model == model) & (slopes["mode"] == mode)]
            slope = f", {fit.slope_ops_per_token.iloc[0]:.1f}/token" if len(fit) else ""
            ax.plot(s.index, s.values, marker="o", linestyle="-" if model == "transformer" else "--",
                    label=f"{model} {mode.replace('_', ' ')}{slope}")
        return _finish(fig, ax, "sequence length n (tokens; generation: n new tokens)",
                       "operators on the critical path", f"Sequential depth, {preset}", legend_size=7)
    if a.key == "c5_scaling" and name.startswith("softmax_"):
        metric = name.removeprefix("softmax_")
        labels = {"max_probability": "mean largest probability", "entropy_nats": "mean entropy (nats)",
                  "jacobian_norm": "mean ‖softmax Jacobian‖_F"}
        fig = _lines(table, "d_k", labels.get(metric, metric), f"Softmax of q·k with and without 1/sqrt(d_k)")
        fig.axes[0].set_xscale("log", base=2)
        return fig
    if a.key == "profiling" and name.startswith("shares_"):
        return _stacked_shares(table, f"Time share per component: {name.removeprefix('shares_')}")
    if a.key == "c1_generation" and name == "throughput":
        fig, ax = plt.subplots(figsize=SIZE)
        for (device, model), g in table.groupby(["device", "model"]):
            ax.plot(g.seq_len, g.forward_tokens_per_s, marker="o", label=f"{model} teacher-forced ({device})")
            ax.plot(g.seq_len, g.generate_tokens_per_s, marker="x", linestyle="--", label=f"{model} greedy ({device})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        return _finish(fig, ax, "sequence length n (tokens)", "throughput (tokens/s)",
                       "Teacher forcing (parallel) vs greedy generation (sequential)", legend_size=7)
    if a.key == "c1_threads" and name in ("speedup", "efficiency"):
        fig = _lines(table, "CPU threads", "speed-up over 1 thread (×)" if name == "speedup" else "parallel efficiency",
                     f"Strong scaling: {name}")
        ax = fig.axes[0]
        p = np.asarray(table.index, float)
        ax.plot(p, p if name == "speedup" else np.ones_like(p), color="grey", linestyle=":", label="ideal")
        ax.legend(fontsize=8)
        return fig
    if a.key == "c3_parallel" and name == "strong_scaling":
        fig, ax = plt.subplots(figsize=SIZE)
        flat = table.reset_index()
        for (layer, combine, h, n), g in flat.groupby(["layer", "combine", "heads", "seq_len"]):
            g = g.sort_values("ranks")
            ax.plot([1, *g.ranks], [1.0, *g.speedup], marker="o", label=f"{layer} {combine} h {h} n {n}")
        top = int(flat.ranks.max())
        ax.plot([1, top], [1, top], color="grey", linestyle=":", label="ideal")
        return _finish(fig, ax, "ranks", "speed-up over one rank (×)", "Heads split over ranks: strong scaling",
                       legend_size=6)
    if a.key == "c2_roofline" and name.startswith("achieved_"):
        device = name.removeprefix("achieved_")
        peak = a.numbers.get(f"gemm_peak_{device}")
        return _lines(table, "sequence length n (tokens)", "achieved matmul GFLOP/s",
                      f"Equation (1) on {device} against the GEMM peak", 1e-9,
                      hline=(peak, "measured GEMM peak") if peak == peak else None)
    if a.key == "c3_heads" and name == "work":
        fig, ax = plt.subplots(figsize=SIZE)
        for column, label in (("matmul_flops", "matmul FLOPs"), ("other_flops", "non-matmul FLOPs"),
                              ("score_bytes", "score matrix bytes")):
            if column in table:
                ax.plot(table.index, table[column], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        return _finish(fig, ax, HEADS_AXIS, "FLOPs per call / bytes",
                       "Work and score memory vs heads")
    if a.key == "c3_heads" and name.startswith("time_"):
        return _lines(table, HEADS_AXIS, "forward time (ms)", "Time vs heads per strategy", 1e3)
    if a.key == "c3_heads" and name.startswith("wo_"):
        return _lines(table[["with W_O", "without W_O"]], "heads h", "forward time (ms)", "With and without W_O", 1e3)
    if a.key == "table1" and name.startswith("time_d"):
        return _lines(table, "sequence length n (tokens)", "forward time (ms)",
                      f"Self-attention vs recurrent layer, d = {name.removeprefix('time_d')}", 1e3)
    if a.key == "hardware" and name == "speedup":
        fig, ax = plt.subplots(figsize=SIZE)
        x = np.arange(len(table))
        ax.bar(x - 0.2, table.median_speedup, 0.4, label="raw")
        ax.bar(x + 0.2, table.median_speedup_per_peak, 0.4, label="per GEMM peak")
        ax.set_xticks(x, table.machine)
        ax.axhline(1, color="black", linewidth=1)
        ax.set_ylabel(f"median speed-up over {table.baseline.iloc[0]} (×)")
        ax.set_title("Machines compared on the same cases")
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig
    return None


def _stacked_shares(table: pd.DataFrame, title: str):
    """One horizontal bar per profiled case, its components stacked by share of the call's time."""
    order = table.sum().sort_values(ascending=False).index
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(table) + 1.8))
    left = np.zeros(len(table))
    colors = plt.get_cmap("tab20")
    for i, comp in enumerate(order):
        values = table[comp].to_numpy()
        ax.barh(range(len(table)), values, left=left, color=colors(i % 20), label=comp)
        left += values
    ax.set_yticks(range(len(table)), table.index, fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the profiled call's time")
    ax.set_title(title)
    ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(table) < 4 else -0.12))
    fig.tight_layout()
    return fig


def memory_figure(profile: dict):
    """Bytes allocated during one profiled call over time, and what holds them at the peak."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 2]})
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
    fig.tight_layout()
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
        fig.savefig(path, dpi=100)
        plt.close(fig)
        saved.append({"file": os.path.basename(path), "caption": caption})
    return saved
