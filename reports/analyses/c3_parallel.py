"""C3 beyond one device: the heads split over ranks (benchmarks.distributed), strong and weak scaling,
and what the communication costs.

Strong scaling holds a case (layer, combine, h, n, d_model, batch) fixed and compares its time on w
ranks with its time on one; weak scaling compares h heads on one rank with h·w heads on w ranks (the
same heads per rank). The communication share is the collectives' time alone over the end-to-end
time. Two ranks on a machine whose cores they share cannot show a compute gain: each rank then has
half the threads one rank had, so the verdict says so when that is the setting.
"""

from __future__ import annotations

import pandas as pd

from .base import Analysis, not_measured, ok_rows

CASE = ["layer", "combine", "heads", "seq_len", "d_model", "batch", "backend", "device"]


def analyse(t: pd.DataFrame) -> Analysis:
    a = Analysis("c3_parallel", "Heads split over ranks: strong and weak scaling, communication", "C3", "")
    times = ok_rows(t, "parallel", "time")
    if times.empty:
        return a.without("no parallel results", not_measured(t, "parallel", "head-parallel") + (
            " Measure it with torchrun --nproc_per_node=N -m attention_bench ranks, for N = 1 and more (its run "
            "folder: results/runs/<machine>-parallel), and give that folder to attention-bench report too."))
    metrics, compute = _per_case(t, "comm_share"), _per_case(t, "compute_s")
    per = _per_case(t, "time")
    ranks = sorted(per.index.get_level_values("ranks").unique())
    a.conditions = _conditions(times)
    if len(ranks) < 2 or 1 not in ranks:
        return a.without("a one-rank run and a run on more ranks", (
            f"Only {[int(r) for r in ranks]} rank(s) measured; scaling needs the same grid at 1 rank and at more "
            f"(torchrun --nproc_per_node=1 and =2 into the same folder)."))
    strong = []
    for key, g in per.groupby(level=CASE):
        base = g.xs(1, level="ranks")
        for w, v in g.droplevel(CASE).items():
            if w > 1:
                share, alone = metrics.get((*key, w)), compute.get((*key, w))
                # inside the layer: what the forward loses to its collectives (end to end minus the same
                # forward with them left out); comm_share: the collectives over compute + collectives, timed alone
                strong.append({**dict(zip(CASE, key, strict=True)), "ranks": w, "time_1_rank_s": float(base.iloc[0]),
                               "time_s": v, "speedup": float(base.iloc[0]) / v, "comm_share": share,
                               "comm_in_layer_share": None if alone is None else (v - alone) / v})
    strong = pd.DataFrame(strong)
    a.tables["strong_scaling"] = strong.set_index(CASE + ["ranks"])
    by_case = strong.sort_values("ranks").groupby(["layer", "combine", "heads", "seq_len"])
    curves = {f"{layer} {combine} h {h} n {n}": pd.Series([1.0, *g.speedup], index=[1, *g.ranks])
              for (layer, combine, h, n), g in by_case}
    a.plot("strong_scaling", table=pd.DataFrame(curves), xlabel="ranks", ylabel="speed-up over one rank (×)",
           title="Heads split over ranks: strong scaling", ideal="identity", log_x=False, log_y=False, legend_size=6)
    weak = []
    for (layer, combine, n, _d, _b, _backend, _device), g in per.groupby(
            level=["layer", "combine", "seq_len", "d_model", "batch", "backend", "device"]):
        at = g.droplevel(["layer", "combine", "seq_len", "d_model", "batch", "backend", "device"])
        for (h, w), v in at.items():
            if w > 1 and (h // w, 1) in at.index:
                weak.append({"layer": layer, "combine": combine, "seq_len": n, "heads_per_rank": h // w, "ranks": w,
                             "efficiency": float(at[(h // w, 1)]) / v})
    if weak:
        a.tables["weak_scaling"] = pd.DataFrame(weak).set_index(
            ["layer", "combine", "seq_len", "heads_per_rank", "ranks"])
    w = max(ranks)
    at_w = strong[strong.ranks == w]
    best = at_w.loc[at_w.speedup.idxmax()]
    a.numbers.update({f"median_speedup_{w}_ranks": float(at_w.speedup.median()), "best_speedup": float(best.speedup),
                      "median_comm_share": float(at_w.comm_share.median()),
                      "median_comm_in_layer_share": float(at_w.comm_in_layer_share.median())})
    by_combine = at_w.groupby("combine").speedup.median()
    sentences = [f"On {w} ranks against one, the median case runs {at_w.speedup.median():.2f}× as fast "
                 f"({at_w.speedup.min():.2f}–{at_w.speedup.max():.2f}×); the best is {best['layer']} with "
                 f"{best['combine']}, "
                 f"h {int(best.heads)}, n {int(best.seq_len)} ({best.speedup:.2f}×). Communication is "
                 f"{at_w.comm_share.median():.0%} of the work at the median ({at_w.comm_share.min():.0%}–"
                 f"{at_w.comm_share.max():.0%}; the collectives and the forward without them, each timed alone "
                 f"in the same blocks); inside the layer "
                 f"(end to end minus the same forward without them) they add {at_w.comm_in_layer_share.median():.0%}."]
    over = (_per_case(t, "comm_bytes_measured") / _per_case(t, "comm_bytes")).dropna()
    over = over[over.index.get_level_values("ranks") > 1]
    if len(over):
        a.numbers["median_wire_over_counted_bytes"] = float(over.median())
        sentences.append(f"The bytes each rank sent, read from the network interfaces, were {over.median():.2f}× "
                         f"the ring "
                         f"algorithms' count at the median ({over.min():.2f}–{over.max():.2f}×; headers and other "
                         f"traffic included).")
    if len(by_combine) == 2:
        sentences.append(f"Combining the heads by all-reduce after a row-parallel W_O gives a median speed-up of "
                         f"{by_combine['allreduce']:.2f}×, by all-gather into the heads' offsets "
                         f"{by_combine['allgather']:.2f}×.")
    if weak:
        eff = pd.DataFrame(weak).groupby("ranks").efficiency.median()
        sentences.append("Weak scaling (the same heads per rank, h growing with the ranks), median efficiency: "
                         + ", ".join(f"{int(r)} ranks {e:.0%}" for r, e in eff.items()) + ".")
    paying = strong.groupby("ranks").speedup.median()
    stops = [int(r) for r, s in paying.items() if s < 1]
    if len(paying) > 1:
        sentences.append("Median speed-up over one rank, by rank count: "
                         + ", ".join(f"{int(r)} ranks {s:.2f}×" for r, s in paying.items()) + ".")
    sentences.append(f"Adding ranks stops paying at {stops[0]} ranks (median speed-up below 1)." if stops else
                     f"Adding ranks still paid at {w} ranks, the most measured.")
    cores, threads = _cores_and_threads(times, w)
    one_machine = times.hosts.fillna(1).max() == 1  # records before hosts was stored ran on one machine
    if one_machine and cores is not None and threads is not None and (times.device == "cpu").all():
        oversubscribed = threads * w > cores
        turns = "; more ranks than cores, so they also took turns on them" if oversubscribed else ""
        sentences.append(f"These {w} ranks shared one machine's {cores} cores ({threads} "
                         f"{'thread' if threads == 1 else 'threads'} each, where one rank had them all{turns}): "
                         f"splitting the heads adds no compute here, so a gain can only come "
                         f"from processes beating threads, and every collective is pure cost. Ranks on separate "
                         f"machines or GPUs are needed to see the compute shrink.")
    a.verdict = f"{a.conditions}: " + " ".join(sentences)
    a.answer = (f"On {w} ranks the median case runs {at_w.speedup.median():.2f}× as fast as on one; the "
                f"collectives are {at_w.comm_share.median():.0%} of its work.")
    return a


def _per_case(t: pd.DataFrame, metric: str) -> pd.Series:
    """One metric of the parallel area's measured cases, indexed by case and rank count."""
    return ok_rows(t, "parallel", metric).set_index(CASE + ["ranks"]).value


def _conditions(rows: pd.DataFrame) -> str:
    backends = "/".join(sorted(rows.backend.dropna().unique()))
    devices = "/".join(sorted(rows.device.dropna().unique()))
    per_rank = {int(r): int(g.threads.dropna().iloc[0]) for r, g in rows.groupby("ranks") if g.threads.notna().any()}
    threads = ", ".join(f"{r} rank{'s' if r > 1 else ''} × {n} thread{'s' if n > 1 else ''}"
                        for r, n in per_rank.items())
    hosts = int(rows.hosts.fillna(1).max())
    where = f" over {hosts} machines" if hosts > 1 else ""
    return (f"head-parallel {'/'.join(sorted(rows.layer.dropna().unique()))} ({backends} on {devices}{where}; "
            f"{threads}), d_model "
            f"{'/'.join(str(int(d)) for d in sorted(rows.d_model.dropna().unique()))}, batch "
            f"{'/'.join(str(int(b)) for b in sorted(rows.batch.dropna().unique()))}, n = "
            f"{int(rows.seq_len.min())}..{int(rows.seq_len.max())}, "
            f"h = {int(rows.heads.min())}..{int(rows.heads.max())}, "
            f"float32")


def _cores_and_threads(rows: pd.DataFrame, ranks: int):
    cores = rows.cpu_count.dropna()
    threads = rows[rows.ranks == ranks].threads.dropna()
    return (int(cores.iloc[0]) if len(cores) else None), (int(threads.iloc[0]) if len(threads) else None)
