"""A pair's sessions as the pairs' estimates read them (``benchmarks.pairs``): each ratio's interval where a
rerun's lands, and the sessions that count where a side ran in two memory states."""

from __future__ import annotations

import math

import numpy as np

from ..timing import measure as timing
from ..timing import rerun
from .mirrored import Estimate, MirroredRounds, estimate


class PairRounds(MirroredRounds):
    """The pairs' rounds; each ratio's interval is where a rerun's lands."""

    #: each pair's kind (``KINDS``): an interval's prior is the typical variance of the pairs of its kind (C2's, a
    #: GEMM of 100 ms a block beside attention in two memory states, move between sessions as C1's do not); unset:
    #: one kind
    kinds: list[str] | None = None

    def session_means(self) -> list[np.ndarray]:
        """Each pair's mean log ratio per session, in session order."""
        logs = [(np.log(r), np.asarray(s)) for r, s in zip(self.ratios, self.sessions, strict=True)]
        return [np.array([x[s == k].mean() for k in dict.fromkeys(s)]) for x, s in logs]

    def estimates(self) -> list[Estimate | None]:
        """Each pair's ratio (the trimmed mean of its rounds, ``mirrored.estimate``) with the interval where a
        rerun's lands (``rerun.half_width`` of its sessions' mean log ratios, moderated by the variance typical
        of this run's pairs of its kind); a pair timed in one session keeps its rounds' bootstrap interval."""
        means = self.session_means()
        priors = self.priors(means)
        return [est if est is None else self.widened(est, means[p], priors[p])
                for p, est in enumerate(super().estimates())]

    def priors(self, means: list[np.ndarray]) -> list[float | None]:
        """Each pair's prior: the variance typical of this run's pairs of its kind, from their session means."""
        kinds = self.kinds or [None] * len(means)
        typical = {k: rerun.typical_variance([m for m, j in zip(means, kinds, strict=True) if len(m) > 1 and j == k])
                   for k in set(kinds)}
        return [typical[k] for k in kinds]

    @staticmethod
    def widened(est: Estimate, means: np.ndarray, prior: float | None, one: bool = False) -> Estimate:
        """``est`` with the interval where a rerun's lands, from the session means ``means`` it is over, moderated
        by ``prior``; as it is from one session, unless ``one`` (a part of a pair's sessions, which may be one:
        the prior alone then)."""
        width = math.nan if len(means) < 2 and not (one and prior) else rerun.half_width(means, prior, of="mean")
        return est if math.isnan(width) else Estimate(est.ratio, *rerun.interval(est.ratio, width), est.rounds)

    def over_sessions(self, p: int, keep: list[int]) -> Estimate:
        """Pair ``p``'s estimate over the rounds of sessions ``keep`` only, its interval as ``estimates`` draws it."""
        rounds = [i for i, s in enumerate(self.sessions[p]) if s in keep]
        est = estimate([self.ratios[p][i] for i in rounds], [self.sessions[p][i] for i in rounds])
        order = list(dict.fromkeys(self.sessions[p]))
        means = self.session_means()
        return self.widened(est, means[p][[order.index(k) for k in dict.fromkeys(keep)]], self.priors(means)[p],
                            one=True)


def memory_state_sessions(rounds_of: PairRounds, p: int, side: str = "a", counted: str = "faster"
                          ) -> tuple[list[int], list[dict] | None]:
    """(the sessions of pair ``p`` that count, the two memory states or None): where its ``side`` faulted its
    intermediates in afresh on every call in some sessions and not in others (``measure.modes_of`` over the
    sessions, ``measure.memory_states``), the sessions of one state count, the ``counted`` one ("faster", or "most":
    the state more sessions drew, the faster on a tie); otherwise all of them. Each state's ``time_s`` is the side's
    time in units of the other side's; ``counted`` marks the one that counts."""
    order = list(dict.fromkeys(rounds_of.sessions[p]))
    means = rounds_of.session_means()[p]  # log(b / a) per session
    faults = []
    for k in order:
        counted_faults = [f[side] for f, s in zip(rounds_of.faults[p], rounds_of.sessions[p], strict=True)
                          if s == k and f.get(side) is not None]
        faults.append(float(np.median(counted_faults)) if counted_faults else None)
    # a session as a round of one block: its level (the side's time in units of the other's) and its faults
    sign = -1 if side == "a" else 1
    level = [{"median_s": math.exp(sign * m), "q25_s": math.exp(sign * m), "q75_s": math.exp(sign * m), "blocks": 1,
              **({"faults_per_call": f} if f is not None else {})} for m, f in zip(means, faults, strict=True)]
    modes = timing.modes_of(level)
    if not timing.memory_states(modes):
        return order, None
    by_level = sorted(range(len(order)), key=lambda i: level[i]["median_s"])
    fast, slow = by_level[: modes[0]["processes"]], by_level[modes[0]["processes"]:]
    most = counted == "most" and len(slow) > len(fast)
    states = [{**m, "counted": i == most} for i, m in enumerate(modes)]
    return [order[i] for i in sorted(slow if most else fast)], states


def fraction_of_gemm(rounds_of: PairRounds, p: int, est: Estimate, flops_a: int, flops_b: int) -> dict:
    """A c2 pair's fraction of the GEMM's rate (the ratio, GEMM time over attention time, times attention's
    matmul FLOPs over the GEMM's), with its interval, over the sessions of attention's faster memory state where
    it ran in two (``memory_state_sessions``; both states kept, each with its fraction and sessions)."""
    keep, modes = memory_state_sessions(rounds_of, p)
    scale = flops_a / flops_b
    counted = est if modes is None else rounds_of.over_sessions(p, keep)
    out = {"flops_a": flops_a, "flops_b": flops_b, "fraction": counted.ratio * scale,
           "fraction_low": counted.low * scale, "fraction_high": counted.high * scale, "fraction_sessions": keep}
    if modes is not None:
        out["modes"] = [{"fraction": scale / m["time_s"], "sessions": m["processes"],
                         "faults_per_call": m.get("faults_per_call"), "counted": m["counted"]} for m in modes]
    return out


def in_memory_states(rounds_of: PairRounds, p: int, est: Estimate) -> dict:
    """A pair's ratio where one side ran in two memory states across the sessions (``memory_state_sessions``: 64
    heads' 134 MB of scores come from fresh pages on every call in most processes, from kept ones in a few, at
    half the time): over the sessions of the state more of them drew, the state a rerun most likely gets, with
    both states and the estimate over every session kept; {} where neither side did. Its interval holds both
    states (``both_states``): a rerun draws its sessions' states afresh, and its ratio lands in either."""
    for side in ("a", "b"):
        keep, modes = memory_state_sessions(rounds_of, p, side, counted="most")
        if modes is not None:
            break
    else:
        return {}
    counted = rounds_of.over_sessions(p, keep)
    states = [{"ratio": m["time_s"] if side == "b" else 1 / m["time_s"], "sessions": m["processes"],
               "faults_per_call": m.get("faults_per_call"), "counted": m["counted"]} for m in modes]
    mine = next(m for m in states if m["counted"])
    other = next(m for m in states if not m["counted"])
    low, high = both_states(counted.low, counted.high, other["ratio"] / mine["ratio"])
    return {"ratio": counted.ratio, "low": low, "high": high, "state_side": side, "state_sessions": keep,
            "state_interval": [counted.low, counted.high], "over_every_session": [est.ratio, est.low, est.high],
            "modes": states}


def both_states(low: float, high: float, factor: float) -> tuple[float, float]:
    """The interval (``low``, ``high``) of a ratio in one memory state, made to hold the other state's too: the
    same interval moved by ``factor``, the other state's ratio over this one's."""
    return min(low, low * factor), max(high, high * factor)
