"""The memory states a machine's pairs drew, kept for its later runs.

A side of a pair (the RNN at paper-base n = 128, 64 heads' scores) runs in one of two memory states per process:
its intermediates from fresh pages on every call, or from kept ones, at another speed (``sessions.in_memory_states``).
A run draws three to five sessions. Where all of them drew one state, the run alone cannot know the other, yet a
rerun's sessions may draw it. So every run keeps, per pair, each session's page faults a call per side and its
mean log ratio. A later run of the machine whose sessions drew one state (its median faults a call on a side)
looks at the earlier sessions of another state on that side: fewer faults, or more (``_away``). Where
they are common enough that a rerun's figure, the state most of its sessions draw, is of that state with a chance
of TAIL or more (a 95% interval's one tail), and earlier runs drew both (the factor between the two states' ratios
within a run: the same code, the same moments; the median over those runs), its interval holds that state too
(``sessions.both_states``), and it says so. Kept MAX_AGE_DAYS under the machine (``between_runs.key``), in the
constants' cache folder.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import statistics
from math import comb

from .. import records
from ..hardware import between_runs
from ..timing import measure
from .sessions import both_states

#: days a run's states stand for the machine
MAX_AGE_DAYS = between_runs.MAX_AGE_DAYS
#: the file's name in the cache folder (``between_runs.path``)
NAME = "memory-states"
#: the least chance that a rerun's figure is of another memory state for the interval to hold that state too
TAIL = 0.025


def pair_key(row: dict) -> str:
    """A pair as the kept states name it: its two cases, and whether its sides ran in workers of their own
    (``pairs.SEPARATE``): a process that runs both sides draws other states."""
    return f"{row['a_case']} | {row['b_case']}" + (" | separate workers" if row.get("separate_workers") else "")


def sessions_of(row: dict) -> list[dict]:
    """A pair row's sessions: each one's page faults a call per side (the median over its rounds that counted them;
    None where none did) and its mean log ratio, in session order."""
    per: dict[int, list[tuple[dict, float]]] = {}
    for f, k, r in zip(row.get("round_faults") or (), row.get("sessions") or (), row.get("round_ratios") or (),
                       strict=False):
        per.setdefault(k, []).append((f, r))
    out = []
    for rounds in per.values():
        faults = {side: [f[side] for f, _ in rounds if f.get(side) is not None] for side in ("a", "b")}
        out.append({**{side: statistics.median(v) if v else None for side, v in faults.items()},
                    "log_ratio": statistics.fmean(math.log(r) for _, r in rounds)})
    return out


def majority_chance(p: float, k: int) -> float:
    """The chance that more than half of ``k`` sessions draw a state each draws with chance ``p``."""
    return sum(comb(k, j) * p**j * (1 - p) ** (k - j) for j in range(k // 2 + 1, k + 1))


def _away(faults: float, drew: float, fewer: bool) -> bool:
    """Whether a session's ``faults`` a call are of another memory state than ``drew``'s, fewer or more
    (``measure.two_states``)."""
    return measure.two_states(*((faults, drew) if fewer else (drew, faults)))


def _factor(runs: list[list[dict]], side: str, drew: float, fewer: bool) -> float | None:
    """The median over the ``runs`` (each its sessions) that drew both of the other state's ratio (its sessions'
    median log ratio) over the state of ``drew`` faults a call's; None where none drew both."""
    factors = []
    for sessions in runs:
        counted = [s for s in sessions if s.get(side) is not None]
        away = [s["log_ratio"] for s in counted if _away(s[side], drew, fewer)]
        like = [s["log_ratio"] for s in counted if not (_away(s[side], drew, True) or _away(s[side], drew, False))]
        if away and like:
            factors.append(statistics.median(away) - statistics.median(like))
    return math.exp(statistics.median(factors)) if factors else None


def widened(row: dict, kept: list[dict]) -> dict:
    """``row`` (a c1 or heads pair timed in one memory state: no ``modes`` of its own; C2's figure is the faster
    state's by design) with its interval over the other states the machine's ``kept`` runs of its pair drew often
    enough (see the module): "earlier_states" says which, and "state_interval" keeps the interval before. Else
    ``row`` as it was."""
    if row.get("status") != "ok" or row.get("modes") or row.get("kind") == "c2":  # C2 counts the faster state
        return row
    mine = sessions_of(row)
    runs = [e["sessions"] for e in kept]
    for side in ("a", "b"):
        drawn = [s[side] for s in mine if s[side] is not None]
        earlier = [s[side] for sessions in runs for s in sessions if s.get(side) is not None]
        if not drawn or not earlier:
            continue
        drew, states = statistics.median(drawn), []
        for fewer in (True, False):
            away = [f for f in earlier if _away(f, drew, fewer)]
            chance = majority_chance(len(away) / len(earlier), len(mine))
            if chance >= TAIL and (factor := _factor(runs, side, drew, fewer)) is not None:
                states.append({"faults": statistics.median(away), "sessions": len(away), "factor": factor,
                               "chance": chance})
        if states:
            low, high = row["low"], row["high"]
            for state in states:
                low, high = both_states(low, high, state["factor"])
            return {**row, "low": low, "high": high, "state_interval": [row["low"], row["high"]],
                    "earlier_states": {"side": side, "faults": drew, "sessions": len(earlier), "states": states}}
    return row


def said(earlier: dict) -> str:
    """A row's ``earlier_states`` in words: "memory state 37,001 page faults a call; 15 of 120 earlier sessions drew
    105,000 (1.35× this ratio, a 4% chance for a rerun): the interval holds both" (earlier sessions: this machine's
    earlier runs')."""
    others = "; ".join(f"{s['sessions']} of {earlier['sessions']} earlier sessions drew {s['faults']:,.0f} "
                       f"({s['factor']:.2f}× this ratio, a {s['chance']:.0%} chance for a rerun)"
                       for s in earlier["states"])
    return (f"memory state {earlier['faults']:,.0f} page faults a call; {others}: the interval holds "
            f"{'both' if len(earlier['states']) == 1 else 'all three'}")


def attach(metadata: dict, rows: list[dict], run: str) -> list[dict]:
    """``rows`` (a pairs command's) with the memory states this machine's earlier runs kept (``widened``), after
    keeping what these rows drew under ``run`` (``keep``)."""
    by_pair: dict[str, list[dict]] = {}
    for e in keep(metadata, rows, run):
        by_pair.setdefault(e["pair"], []).append(e)
    return [widened(r, by_pair.get(pair_key(r), [])) if "a_case" in r else r for r in rows]


def keep(metadata: dict, rows: list[dict], run: str) -> list[dict]:
    """Keep the sessions of ``rows`` (a pairs record's) for the machine of ``metadata`` under ``run`` (the record's
    path: a run kept again replaces its own), dropping runs older than MAX_AGE_DAYS; the other runs kept."""
    file = between_runs.path(metadata, NAME)
    now = dt.datetime.now(dt.timezone.utc)
    kept = [e for e in load(file, metadata) if e["run"] != run
            and now - dt.datetime.fromisoformat(e["at"]) <= dt.timedelta(days=MAX_AGE_DAYS)]
    mine = [{"pair": pair_key(r), "sessions": sessions_of(r), "run": run, "at": now.isoformat()}
            for r in rows if r.get("status") == "ok" and "a_case" in r]
    os.makedirs(os.path.dirname(file), exist_ok=True)
    records.write_json_atomic(file, {"key": between_runs.key(metadata), "kept": kept + mine})
    return kept


def load(file: str, metadata: dict) -> list[dict]:
    """The runs' sessions kept in ``file`` for the machine of ``metadata``; [] where none or unreadable."""
    try:
        saved = records.read_json(file)
    except (OSError, records.UnreadableRecord):
        return []
    kept = saved.get("kept") if saved.get("key") == between_runs.key(metadata) else None
    fields = {"pair", "sessions", "run", "at"}
    return [e for e in kept or () if isinstance(e, dict) and fields <= e.keys() and isinstance(e["sessions"], list)]
