"""C1, C2 and C3 from ratios timed paired: both cases of each ratio in mirrored blocks, at the same moments.

A ratio of two separate timings moves with the machine's speed between them; ``benchmarks.pairs`` times
the Transformer and the RNN (1 against 64 heads; equation (1) against the GEMM) in the same moments, with the 95%
interval where a rerun's ratio lands, from fresh processes (sessions). This analysis reads its records
(``pairs-<device>.json`` in the run folder).
"""

from __future__ import annotations

import math
import re

import pandas as pd

from benchmarks.ceiling import ceiling
from benchmarks.core.hardware.machine import BUSY_SHARE
from benchmarks.core.pairing import kept_states
from benchmarks.core.pairing.mirrored import FIXED_ALLOCATOR, busy_rounds
from benchmarks.core.timing import measure, rerun
from transformer import PRESETS

from .base import BETWEEN, Analysis, fmt_ratio

MISSING = ("No paired ratios in this run: the main job times them after the grid (`--pairs-budget`), or run "
           "`attention-bench pairs --out RUN_FOLDER`.")


def d_model(preset: str) -> int:
    """A preset's width (0 for one this version does not know), to order model sizes."""
    config = PRESETS.get(preset)
    return getattr(config, "d_model", 0) if config is not None else 0


def _case(params: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in params.items() if k not in ("device", "out_proj"))


def table(records: list[dict]) -> pd.DataFrame:
    """One row per measured pair: kind, device, case, the ratio b/a with its interval, rounds, both times."""
    rows = [{"kind": p["kind"], "device": r.get("device", "cpu"), "case": _case(p["params"]), "ratio": p["ratio"],
             "low": p["low"], "high": p["high"], "rounds": p["rounds"], "a_s": p["a_s"], "b_s": p["b_s"],
             "preset": p["params"].get("preset"), "seq_len": p["params"].get("seq_len"),
             "strategy": p["params"].get("strategy"), "backend": p["params"].get("backend"),
             **{k: p.get(k, math.nan) for k in FRACTION},
             "states": _states(p),
             "settings": _settings(p.get("worker_env"), r.get("worker_env")),
             "a": p.get("a"), "b": p.get("b"), "busy_rounds": _busy_rounds(p.get("round_others_cpu_share")),
             "separate": bool(p.get("separate_workers")),
             **{f"faults_{side}": _median_faults(p.get("round_faults"), side) for side in ("a", "b")}}
            for r in records for p in r["pairs"] if p.get("status") == "ok"]
    return pd.DataFrame(rows)


def _where(t: pd.DataFrame) -> str:
    """Where a ratio's two sides ran: 'each side in a process of its own (c1, heads; c2 both in one)'."""
    apart = list(dict.fromkeys(t.kind[t.separate]))
    together = list(dict.fromkeys(t.kind[~t.separate]))
    if not apart:
        return "both in one process"
    if not together:
        return "each side in a process of its own (as a user runs one model)"
    return (f"each side in a process of its own ({', '.join(apart)}: as a user runs one model; "
            f"{', '.join(together)}: both in one)")


def _median_faults(rounds: list[dict] | None, side: str) -> float:
    """A side's minor page faults a call, the median over the rounds that counted them (each over its blocks' calls,
    after the session's warm-up); NaN where none did."""
    counted = [r[side] for r in rounds or () if r.get(side) is not None]
    return float(pd.Series(counted).median()) if counted else math.nan


def _busy_rounds(shares: list[float | None] | None) -> float:
    """How many of a pair's rounds were timed while other processes used more than BUSY_SHARE of the cores; NaN
    where its record did not measure it."""
    over, measured = busy_rounds(shares)
    return float(len(over)) if measured else math.nan


#: a c2 pair's fraction of the GEMM's rate, with its interval
FRACTION = ("fraction", "fraction_low", "fraction_high")
#: the group of figures whose variance between the machine's runs each kind of pair's interval adds: its answer
#: row's (``reconcile``: ``base.group`` of the figure it quotes), so that both state one interval
GROUPS = {"c1": "c1_length.paired", "heads": "c3_heads.paired", "c2": "c2_roofline.paired"}


def stated(t: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """``table``'s rows with each ratio's interval, and a c2 pair's fraction's, widened by its kind's variance
    between runs (``GROUPS``, ``base.BETWEEN``, ``rerun.widened``), as the answer rows state them; and whether
    any was."""
    between, t, moved = BETWEEN.get() or {}, t.copy(), False
    for i, r in t.iterrows():
        variance = between.get(GROUPS.get(r.kind, ""))
        for value, low, high in (("ratio", "low", "high"), FRACTION):
            if variance and r[value] > 0 and r[low] > 0:  # false for a NaN
                t.loc[i, [low, high]] = rerun.widened(r[value], r[low], r[high], variance)
                moved = True
    return t, moved


def _settings(mine: dict | None, record: dict | None) -> str | None:
    """What a pair's worker ran with beyond its record's worker ('glibc's allocator fixed'), or None."""
    extra = {k: v for k, v in (mine or {}).items() if (record or {}).get(k) != v}
    if not extra:
        return None
    return "glibc's allocator fixed" if extra == FIXED_ALLOCATOR else _env(extra)


def _states(pair: dict) -> str | None:
    """Where a pair's sessions ran one side in two memory states: "its faster memory state, 2 of 3 sessions; the
    other was at 24%" (c2: the faster state counts), "over 2 of 3 sessions, the memory state most drew (65,538 page
    faults a call); the other, at 0, gave 2.16×; the interval holds both" (another pair: the state more sessions
    drew counts); where they drew one of the states earlier runs of the machine kept, ``kept_states.said``; else
    None."""
    modes = pair.get("modes")
    if not modes:
        return kept_states.said(pair["earlier_states"]) if pair.get("earlier_states") else None
    counted = next((m for m in modes if m.get("counted")), modes[0])
    other = next(m for m in modes if m is not counted)
    total = counted["sessions"] + other["sessions"]
    was = f"{'other was' if other['sessions'] == 1 else 'others were'} at"
    if "fraction" in counted:
        return f"its faster memory state, {counted['sessions']} of {total} sessions; the {was} {other['fraction']:.0%}"
    others = "other" if other["sessions"] == 1 else "others"
    mine, theirs = _faults(counted), _faults(other)
    return (f"over {counted['sessions']} of {total} sessions, the memory state most drew"
            + (f" ({mine} page faults a call)" if mine else "") + f"; the {others}"
            + (f", at {theirs}," if theirs else "") + f" gave {fmt_ratio(other['ratio'])}"
            + ("; the interval holds both" if "state_interval" in pair else ""))


def _faults(state: dict) -> str | None:
    """A state's page faults a call ('26,354'), where they were counted."""
    faults = state.get("faults_per_call")
    return None if faults is None else f"{faults:,.0f}"


def _c2_phrase(row) -> str:
    return (f"{row.backend} n = {int(row.seq_len)} {row.fraction:.0%} ({_percents(row.fraction_low, row.fraction_high)}"
            + (f"; {row.states}" if isinstance(row.states, str) else "") + ")")


def _percents(low: float, high: float) -> str:
    """'45-53%'."""
    return f"{low:.0%}-{high:.0%}".replace("%-", "-")


def _c1_phrase(row) -> str:
    where = f"{row.preset} n = {int(row.seq_len)}"
    ratio = f"{fmt_ratio(row.ratio)}, {row.low:.2f}-{row.high:.2f}" + (f"; {row.states}" if isinstance(
        row.states, str) else "")
    if row.low <= 1 <= row.high:
        return f"{where}: parity ({ratio})"
    return f"{where}: the {'Transformer' if row.ratio > 1 else 'RNN'} faster ({ratio})"


def analyse(records: list[dict]) -> Analysis:
    """C1 (Transformer against RNN per size and length) and C3 (64 heads against 1) from paired ratios."""
    a = Analysis("paired", "The verdicts' ratios, timed paired in the same moments", "C1/C2/C3", "")
    t, moved = stated(table(records))
    if t.empty:
        return a.without("no paired ratios", MISSING)
    shown = t.drop(columns=["preset", "seq_len", "strategy", "backend", "a", "b"]).set_index(["kind", "device", "case"])
    a.tables["paired_ratios"] = shown
    a.units["paired_ratios"] = ("b/a with its 95% interval (low-high), rounds, and each side's median time (s); "
                                "c1: RNN time / Transformer time (above 1: the Transformer is faster); heads: "
                                "time with 64 heads / with 1 head, at equal FLOPs; busy_rounds: rounds timed while "
                                f"other processes used more than {BUSY_SHARE:.0%} of the cores")
    parts, answer = [], []
    c1 = t[t.kind == "c1"]
    if not c1.empty:
        parts.append("C1, teacher-forced forward, RNN time over Transformer time: "
                     + "; ".join(_c1_phrase(r) for r in c1.itertuples()))
        size = c1.preset.map(lambda p: d_model(p))
        lead = c1.assign(size=size).sort_values(["size", "seq_len"]).iloc[-1]  # the largest size's longest n
        answer.append(f"RNN/Transformer time {fmt_ratio(lead.ratio)} ({lead.low:.2f}-{lead.high:.2f}) at "
                      f"{lead.preset} n = {int(lead.seq_len)}")
        for r in c1.itertuples():
            a.numbers[f"c1_{r.preset}_n{int(r.seq_len)}_{r.device}"] = r.ratio
    c2 = t[t.kind == "c2"].sort_values(["device", "backend", "seq_len"])
    if not c2.empty:
        parts.append("C2, equation (1)'s matmul FLOP/s as a fraction of the GEMM's timed beside it (GEMM time over "
                     f"attention time, times their FLOPs{_with(c2)}): "
                     + "; ".join(_c2_phrase(r) for r in c2.itertuples()))
        for r in c2.itertuples():
            a.numbers[f"c2_{r.backend}_n{int(r.seq_len)}_{r.device}"] = r.fraction
        best = c2.loc[c2.groupby(["device", "backend"]).fraction.idxmax()]
        answer.append("equation (1) at " + ", ".join(f"{r.fraction:.0%} ({r.backend})" for r in best.itertuples())
                      + " of the GEMM's rate")
    heads = t[t.kind == "heads"]
    if not heads.empty:
        parts.append("C3, 64 heads of d_model/64 against 1 head of d_model at equal FLOPs: "
                     + "; ".join(f"{r.strategy} {fmt_ratio(r.ratio)} ({r.low:.2f}-{r.high:.2f}"
                                 + (f"; {r.states}" if isinstance(r.states, str) else "") + ")"
                                 for r in heads.itertuples()))
        lo, hi = heads.ratio.min(), heads.ratio.max()
        answer.append(f"64 heads cost {fmt_ratio(lo)}-{fmt_ratio(hi)} one head")
        for r in heads.itertuples():
            a.numbers[f"heads_{r.strategy}_{r.device}"] = r.ratio
    low, high = int(t.rounds.min()), int(t.rounds.max())
    a.verdict = ". ".join(parts) + (f". Each ratio's two cases ran in mirrored blocks, {_where(t)}, over "
                                    f"{low if low == high else f'{low}-{high}'} rounds in fresh processes; its "
                                    "interval is where a "
                                    "rerun's ratio lands (95%), from the spread between the processes"
                                    + (" and what moved between this machine's runs" if moved else "") + ".")
    busy = t[t.busy_rounds > 0]
    if not busy.empty:
        a.verdict += (f" Timed on a busy machine (other processes used more than {BUSY_SHARE:.0%} of the cores): "
                      + "; ".join(f"{r.kind} {r.case}, {int(r.busy_rounds)} of {int(r.rounds)} rounds"
                                  for r in busy.itertuples())
                      + ". Those ratios are noisier than on a quiet machine.")
    a.answer = "Paired: " + "; ".join(answer) + "."
    devices = sorted(t.device.unique())
    threads = sorted({r.get("threads") for r in records if r.get("threads")})
    a.conditions = (f"{'/'.join(devices)}, {'/'.join(map(str, threads))} threads, float32, "
                    f"grid {'/'.join(sorted({r.get('grid', '?') for r in records}))}; {regime_said(records)}")
    return a


def _env(env: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(env.items())) if env else "every runtime default"


def regime_said(records: list[dict]) -> str:
    """The regime the pairs' workers ran in, and whether it is the grid's (its machine.json's): the same
    ratio timed in two regimes is two different figures."""
    said = []
    for r in records:
        mine, grid = r.get("regime"), r.get("run_regime")
        if mine is None:  # a record from before regimes were kept: what it set beyond the environment
            said.append(f"worker run with {_env(r.get('worker_env'))}" if r.get("worker_env") else "worker regime "
                        "not recorded")
        elif grid is None or (mine.get("env"), mine.get("threads")) == (grid.get("env"), grid.get("threads")):
            said.append(f"worker in the grid's regime ({_env(mine.get('env'))})")
        else:
            said.append(f"worker in another regime than the grid's: {_env(mine.get('env'))}, {mine.get('threads')} "
                        f"threads, against {_env(grid.get('env'))}, {grid.get('threads')} threads")
        for kind in dict.fromkeys(p["kind"] for p in r.get("pairs", []) if _settings(p.get("worker_env"),
                                                                                     r.get("worker_env"))):
            env = next(p["worker_env"] for p in r["pairs"] if p["kind"] == kind)
            said.append(f"the {kind} pairs' worker with {_settings(env, r.get('worker_env'))} ({_env(env)})")
    return "; ".join(dict.fromkeys(said))


def _agree(paired: tuple[float, float, float], grid: tuple[float, float, float] | None, value: float) -> bool:
    """Whether the grid's figure agrees with the paired one: not ``rerun.apart`` where both carry an interval
    (value, low, high), else the grid's ``value`` inside the paired interval."""
    if grid is not None and (apart := rerun.apart(paired, grid)) is not None:
        return not apart
    return paired[1] <= value <= paired[2]


def reconcile(c1: Analysis, heads: Analysis, paired: Analysis, records: list[dict], c2: Analysis | None = None,
              hands_back: bool = False) -> None:
    """One answer per ratio: where a ratio was timed paired, the C1, C2 and C3/C4 answers give the paired figure
    with its 95% interval in place of the grid's, and say so where the grid's figure disagrees with it
    (``_agree``: further apart than the two intervals allow, or its value outside where it has none); the
    paired row then gives no figure of its own, only how many of its ratios the grid agrees with. ``hands_back``:
    the machine hands its free memory back to its host (``machine.free_page_reporting``), which the C3/C4 verdict
    names beside the fresh pages its calls fault in."""
    t = table(records)
    if t.empty:
        return
    checked, disagree = _reconcile_c2(c2, t) if c2 is not None else (0, [])
    factors = c1.tables.get("factors", pd.DataFrame())
    c1_pairs = t[t.kind == "c1"]
    if not factors.empty and not c1_pairs.empty:
        at_max = factors[factors.seq_len == factors.groupby(["device", "preset"]).seq_len.transform("max")]
        phrases = []
        for r in at_max.itertuples():
            p = c1_pairs[(c1_pairs.device == r.device) & (c1_pairs.preset == r.preset)
                         & (c1_pairs.seq_len == r.seq_len)]
            spread = isinstance(getattr(r, "speedup_low", None), float) and not math.isnan(r.speedup_low)
            low, high = (r.speedup_low, r.speedup_high) if spread else (r.speedup, r.speedup)
            where = f"{r.preset} n = {r.seq_len}" + ("" if at_max.device.nunique() == 1 else f" ({r.device})")
            if p.empty:
                phrases.append(f"{where}: {fmt_ratio(r.speedup)}" + (f" (range {fmt_ratio(low)}-{fmt_ratio(high)})"
                                                                      if spread else " (grid only, no interval)"))
                continue
            q = p.iloc[0]
            checked += 1
            c1.numbers[f"paired_speedup_{r.device}_{r.preset}_n{r.seq_len}"] = q.ratio
            c1.quoted = [f"paired_speedup_{r.device}_{r.preset}_n{r.seq_len}" if k == f"speedup_{r.device}_{r.preset}_"
                         f"n{r.seq_len}" else k for k in c1.quoted]
            shown = c1.interval(f"paired_speedup_{r.device}_{r.preset}_n{r.seq_len}", q.low, q.high)
            phrase = (f"{where}: {fmt_ratio(q.ratio)} (paired, 95% {shown[0]:.2f}-{shown[1]:.2f}"
                      + (f"; {q.states}" if isinstance(q.states, str) else "") + ")")
            if not _agree((q.ratio, q.low, q.high), (r.speedup, low, high) if spread else None, r.speedup):
                disagree.append(f"C1 {where}")
                phrase += (f", but the grid gave {fmt_ratio(r.speedup)}"
                           + (f" ({fmt_ratio(low)}-{fmt_ratio(high)})" if spread else "") + ", apart from it")
            phrases.append(phrase)
        c1.answer = ("Transformer speed over the width-matched RNN's, teacher-forced forward: " + "; ".join(phrases)
                     + ".")
    heads_pairs = t[t.kind == "heads"]
    grid_ratios = {m.group(3): (int(m.group(1)), int(m.group(2)), v) for k, v in heads.numbers.items()
                   if (m := re.fullmatch(r"time_ratio_h(\d+)_over_h(\d+)_(\w+)", k))}
    ranges = heads.tables.get("time_ratios", pd.DataFrame())  # the grid's ratios over processes
    if grid_ratios and not heads_pairs.empty and "matmul_flops_max_over_min" in heads.numbers:
        parts, hs = [], set()
        for strategy, (hi, lo, ratio) in grid_ratios.items():
            hs.add((hi, lo))
            p = heads_pairs[heads_pairs.strategy == strategy]
            if p.empty or (hi, lo) != (64, 1):
                parts.append(f"{ratio:.2f}× ({strategy}, grid only)")
                continue
            q = p.iloc[0]
            checked += 1
            heads.numbers[f"paired_time_ratio_h{hi}_over_h{lo}_{strategy}"] = q.ratio
            grid_key = f"time_ratio_h{hi}_over_h{lo}_{strategy}"
            heads.quoted = [f"paired_{k}" if k == grid_key else k for k in heads.quoted]
            shown = heads.interval(f"paired_time_ratio_h{hi}_over_h{lo}_{strategy}", q.low, q.high)
            part = (f"{q.ratio:.2f}× ({strategy}, paired, 95% {shown[0]:.2f}-{shown[1]:.2f}"
                    + (f"; {q.states}" if isinstance(q.states, str) else "") + ")")
            grid = ranges[ranges.strategy == strategy] if not ranges.empty else ranges
            low, high = (grid.low.iloc[0], grid.high.iloc[0]) if not grid.empty else (ratio, ratio)
            if not _agree((q.ratio, q.low, q.high), None if grid.empty else (ratio, low, high), ratio):
                disagree.append(f"C3 {strategy}")
                part = part[:-1] + f"; the grid gave {ratio:.2f}×" + (
                    f" ({low:.2f}-{high:.2f})" if not grid.empty else "") + ", apart from it)"
            parts.append(part)
        hi, lo = max(hs)
        heads.answer = (f"Matmul FLOPs equal at every h (max/min {heads.numbers['matmul_flops_max_over_min']:.4f}), "
                        f"yet h = {hi} takes " + ", ".join(parts) + f" the time of h = {lo}.")
        heads.verdict += _fresh_pages(heads_pairs, hands_back)
    if checked:
        paired.answer = (f"The paired ratios stand in the C1, C2 and C3/C4 rows, with their 95% intervals; the grid's "
                         f"own timings agree within them for {checked - len(disagree)} of {checked}"
                         + (f" (not for {', '.join(disagree)})" if disagree else "") + ".")


def _fresh_pages(pairs: pd.DataFrame, hands_back: bool = False) -> str:
    """' In the paired sessions each call at h = 64 faulted in 65,538 fresh pages (batched), ...' where a heads pair's
    64-head side faulted in more than a warm-up's few pages a call, and on a machine that hands its free memory back
    to its host (``hands_back``) what that costs; else ''."""
    counted = pairs.dropna(subset=["faults_a", "faults_b"])
    if counted.empty or counted.faults_b.max() <= measure.FAULT_PAGES:
        return ""
    many = ", ".join(f"{r.faults_b:,.0f} ({r.strategy})" for r in counted.itertuples())
    one = ", ".join(f"{r.faults_a:,.0f}" for r in counted.itertuples())
    return (f" In the paired sessions each call at h = {counted.b.iloc[0]} faulted in fresh memory pages: {many}, "
            f"against {one} at h = {counted.a.iloc[0]} (minor page faults a call, medians over the sessions' blocks, "
            "after their warm-up): memory the allocator gave back to the OS after the call before, written afresh, "
            "in time that no FLOP count sees." + (
                " This machine hands its free memory back to its host (free page reporting): a fresh page may wait "
                "for the host as well, more so after other processes freed much memory, so a session's ratio moves "
                "with what ran just before it." if hands_back else ""))


def _reconcile_c2(c2: Analysis, t: pd.DataFrame) -> tuple[int, list[str]]:
    """C2's answer from its paired fractions: per device and backend the best over the n timed paired, with its
    interval, in place of the grid's best fraction of the calibrated peak (a peak calibrated minutes away from
    the cases, at the host's speed of that moment), and where the grid's best disagrees with it (``_agree``),
    said so; where the pairs ran with settings of their own (``benchmarks.pairs.KIND_ENV``), the grid's figure is
    given beside, unchecked: a figure of another regime. Returns (figures checked, those that disagree)."""
    pairs = t[(t.kind == "c2") & t.fraction.notna()]
    if pairs.empty:
        return 0, []
    checked, disagree, phrases = 0, [], {}
    for (device, backend), g in pairs.groupby(["device", "backend"]):
        grid_key = f"best_fraction_{device}_{backend}"
        if grid_key not in c2.numbers:
            continue
        q = g.loc[g.fraction.idxmax()]
        key = f"paired_{grid_key}"
        c2.numbers[key] = q.fraction
        c2.quoted = [key if k == grid_key else k for k in c2.quoted if k != f"gemm_peak_{device}"]
        shown = c2.interval(key, q.fraction_low, q.fraction_high)
        value = c2.numbers[grid_key]
        low, high = c2.intervals.get(grid_key, (value, value))
        grid = f"{value:.0%}" + (f" ({_percents(low, high)})" if grid_key in c2.intervals else "")
        other = isinstance(q.settings, str)  # timed in another regime than the grid: two figures, each with its own
        phrase = (f"{backend} {q.fraction:.0%} at n = {int(q.seq_len)} (paired, 95% {_percents(*shown)}"
                  + (f"; {q.states}" if isinstance(q.states, str) else "")
                  + (f"; the grid, with the default allocator: {grid} of the calibrated peak" if other else "") + ")")
        if not other:
            checked += 1
            if not _agree((q.fraction, q.fraction_low, q.fraction_high),
                          (value, low, high) if grid_key in c2.intervals else None, value):
                disagree.append(f"C2 {backend}" + ("" if pairs.device.nunique() == 1 else f" ({device})"))
                phrase += f", but the grid gave {grid} of the calibrated peak, apart from it"
        phrases.setdefault(device, []).append(phrase)
    if phrases:
        c2.answer = " ".join(f"Best fraction of the GEMM's rate timed beside it ({_gemm(device)}) on "
                             f"{device}: " + ", ".join(p) + "." for device, p in phrases.items())
        if _with(pairs):  # the regime the paired fractions were timed in, said once, in the conditions
            c2.conditions += f"; the paired fractions{_with(pairs)}"
    return checked, disagree


def _with(rows: pd.DataFrame) -> str:
    """', with glibc's allocator fixed' where every row's worker ran with that beyond its record's; else ''."""
    said = set(rows.settings)
    return f", with {said.pop()}" if len(said) == 1 and None not in said else ""


def _gemm(device: str) -> str:
    """'the 2048² GEMM': the GEMM the pairs hold a device's attention to."""
    return f"the {ceiling(device)['size']}² GEMM"
