"""Where a rerun lands: the interval a figure states is the CONFIDENCE interval of the same figure measured
again, by the same command on the same machine.

A figure is the median (or mean) of a few samples: processes (the runner's rounds, each a fresh process) or
sessions (a paired ratio's fresh pairs of workers). Three samples say little about their own spread, and
their range leaves out another run's median in 4 of 10 runs even when nothing changed (six draws of one
distribution, three and three: the second three's median falls outside the first three's range with
probability 8/20). So a sample's variance (of logs) is moderated with the variance typical of its run's
other figures of the same kind, as if that were PRIOR_DOF more samples (the empirical-Bayes variance of
Smyth's limma), and the interval is the figure +- t(CONFIDENCE, own + PRIOR_DOF dof) x the moderated standard
error x sqrt(2): sqrt(2), because the rerun's figure is as uncertain as this one.

A machine whose state changes between runs (another tenant on the host's cores, a clock policy) moves a rerun's
figure further than a run's own processes show. ``attention-bench reproduce`` measures that variance between
runs on one machine; later runs on it add it (``widened``): a rerun then differs from this figure by the two
figures' own errors and the two runs' states.

A ratio of two such figures (a speed-up, a time over another time) takes their half-widths in quadrature
(``ratio``): the runner's processes are each a new draw per case (the cases of one process move together by
about 1%, each case on its own by about 5% on a 2-core VM), so the two are independent.
"""

from __future__ import annotations

import functools
import math
import statistics

import numpy as np

CONFIDENCE = 0.95
#: how many samples the run's typical variance counts as, beside a figure's own: enough that three samples'
#: own variance, which is anywhere from 0.05x to 3x the true one, does not set the interval alone
PRIOR_DOF = 4
#: the normal quantile of CONFIDENCE, two-sided: for the variance between runs, pooled over many figures
Z = statistics.NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, dof: float) -> float:
    """Student's t quantile (0.5 < p < 1): the CDF, integrated from the density by Simpson's rule, inverted
    by bisection."""
    if not 0.5 < p < 1 or dof <= 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and dof > 0; got p={p}, dof={dof}")
    log_norm = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)

    def below(x: float) -> float:  # P(0 <= T <= x)
        t = np.linspace(0.0, x, 2001)
        f = np.exp(log_norm - (dof + 1) / 2 * np.log1p(t * t / dof))
        h = x / 2000
        return float(h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()))

    lo, hi = 0.0, 1.0
    while below(hi) < p - 0.5:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if below(mid) < p - 0.5 else (lo, mid)
    return (lo + hi) / 2


def typical_variance(logs: list[np.ndarray]) -> float | None:
    """The variance of one sample typical of a run's figures of one kind: the median of their sample variances
    (each of len - 1 dof), over the median of a chi-square of that many dof divided by them (so that it
    estimates the variance itself, not the median of its noisy estimates). None without two samples
    anywhere. A median, so that a few two-mode figures do not widen every other figure's interval."""
    variances = [float(np.var(x, ddof=1)) for x in logs if len(x) > 1]
    if not variances:
        return None
    dof = int(np.median([len(x) - 1 for x in logs if len(x) > 1]))
    chi2_median = dof * (1 - 2 / (9 * dof)) ** 3  # Wilson-Hilferty
    return float(np.median(variances)) / (chi2_median / dof)


def half_width(logs: np.ndarray, prior: float | None, of: str = "median") -> float:
    """Half the interval's width in log units around the figure ``of`` ``logs`` (the samples' logs): "median"
    (its standard error about sqrt(pi / (2k + 1)) x sigma: 0.670 at k = 3, 0.534 at 5, exact within 1% for
    normal samples) or "mean" (1 / sqrt(k)). Without a prior, from the samples' own variance alone (k - 1 dof);
    NaN with fewer than two samples and no prior."""
    logs = np.asarray(logs, dtype=float)
    k = len(logs)
    own = float(np.var(logs, ddof=1)) if k > 1 else 0.0
    if prior is None or k < 2 and not prior:
        return math.nan if k < 2 else _width(own, k - 1, k, of)
    variance = (PRIOR_DOF * prior + (k - 1) * own) / (PRIOR_DOF + k - 1)
    return _width(variance, PRIOR_DOF + k - 1, k, of)


def _width(variance: float, dof: float, k: int, of: str) -> float:
    if dof <= 0:
        return math.nan
    se = math.sqrt(variance) * (math.sqrt(math.pi / (2 * k + 1)) if of == "median" else 1 / math.sqrt(k))
    return t_quantile(0.5 + CONFIDENCE / 2, dof) * se * math.sqrt(2)


def interval(value: float, width: float) -> tuple[float, float]:
    """(low, high) of a positive ``value`` with ``width`` (log units) either side."""
    return value * math.exp(-width), value * math.exp(width)


def from_draws(value: float, draws: np.ndarray, clusters: int | None = None) -> tuple[float, float]:
    """The interval of a positive ``value`` whose sampling distribution ``draws`` are (a bootstrap, or a
    simulation from its inputs' errors): their log standard deviation as its standard error, at Z, x sqrt(2).
    ``clusters``: the draws resample so many clusters (processes) with replacement, whose spread a bootstrap
    reads low by sqrt((k - 1) / k), so the standard error is scaled back by its inverse; and it is known from k
    clusters, k - 1 degrees of freedom, so it is taken at Student's t there, not at Z, as ``half_width`` takes a
    spread of k samples (at 3 processes, where a run's every process shifts all of its cases, a rerun's figure
    fell inside 89% of the intervals at Z and 97% at t, simulated)."""
    if clusters and clusters > 1:
        scale, q = math.sqrt(clusters / (clusters - 1)), t_quantile(0.5 + CONFIDENCE / 2, clusters - 1)
    else:
        scale, q = 1.0, Z
    return interval(value, q * float(np.std(np.log(draws), ddof=1)) * scale * math.sqrt(2))


def count_interval(count: int, n: int) -> tuple[float, float]:
    """The interval of ``count`` of ``n`` (each one a draw that a rerun makes again, a check that passes or
    fails, say): the binomial's variance at Agresti and Coull's proportion ((count + 2) / (n + 4): a count of 0
    or n still varies), twice (this run's count and the rerun's), at Z, within [0, n]."""
    p = (count + 2) / (n + 4)
    width = Z * math.sqrt(2 * n * p * (1 - p))
    return max(0.0, count - width), min(float(n), count + width)


def widened(value: float, low: float, high: float, between: float) -> tuple[float, float]:
    """The interval (low, high) of ``value`` with a variance ``between`` (of logs) between runs added: the two
    runs' states are independent, so their difference adds 2 x ``between`` to the rerun's variance, at Z. Each
    side is widened from its own distance to ``value`` (an interval over two memory states reaches further
    towards the other state)."""
    extra = 2 * Z**2 * between
    below, above = max(math.log(value / low), 0.0), max(math.log(high / value), 0.0)
    return value * math.exp(-math.sqrt(below**2 + extra)), value * math.exp(math.sqrt(above**2 + extra))


def standard_error2(low: float, high: float, samples: int) -> float:
    """The squared standard error (of logs) of a figure whose interval ``half_width`` gave from ``samples``
    samples moderated by a prior (its t at PRIOR_DOF + samples - 1 dof): what a run says of its own figure, for
    ``reports.reproduce.between_runs`` to measure what moves beyond it."""
    quantile = t_quantile(0.5 + CONFIDENCE / 2, PRIOR_DOF + samples - 1)
    return (math.log(high / low) / 2 / quantile / math.sqrt(2)) ** 2


def ratio(first: tuple[float, float, float], second: tuple[float, float, float]) -> tuple[float, float]:
    """The interval of second / first from each figure's (value, low, high): their log half-widths in
    quadrature (independent figures), around the ratio of the values."""
    (a, a_lo, a_hi), (b, b_lo, b_hi) = first, second
    widths = [math.log(hi / lo) / 2 for lo, hi in ((a_lo, a_hi), (b_lo, b_hi))]
    return interval(b / a, math.hypot(*widths))


def apart(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool | None:
    """Whether two figures (value, low, high), each with the interval where a rerun of it lands, differ at that
    interval's confidence: their log distance beyond sqrt((h_a^2 + h_b^2) / 2), h a half-width (each is
    sqrt(2) x its figure's standard error times the quantile; the difference's standard error is the two in
    quadrature), each on the side that faces the other figure. None where either has no interval or a value that
    is not positive."""
    if None in (a[1], b[1]) or min(a[0], b[0], a[1], b[1]) <= 0:
        return None
    up = b[0] >= a[0]
    h_a = math.log(a[2] / a[0]) if up else math.log(a[0] / a[1])
    h_b = math.log(b[0] / b[1]) if up else math.log(b[2] / b[0])
    return abs(math.log(b[0] / a[0])) > math.sqrt((h_a**2 + h_b**2) / 2)


def between_widths(variance: dict[str, float], counts: dict[str, int] | None = None) -> str:
    """Each group's variance between runs as the half-width it adds to a figure's interval alone ("c1_threads
    ±24%"), with how many figures measured it."""
    return ", ".join(f"{g} ±{math.expm1(Z * math.sqrt(2 * v)):.1%}" + (f" ({counts[g]} figures)" if counts else "")
                     for g, v in sorted(variance.items()))
