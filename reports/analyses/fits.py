"""Curve fits the verdicts use: power laws in log-log space and where two curves cross."""

from __future__ import annotations

import math

import numpy as np


def fit_power_law(x, y) -> tuple[float, float]:
    """Least-squares fit of log y = log c + k log x; returns (k, c). Needs two distinct x > 0."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if len(np.unique(x[keep])) < 2:
        raise ValueError(f"a power-law fit needs at least two distinct positive x; got {list(x[keep])}")
    k, logc = np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)
    return float(k), float(math.exp(logc))


def crossover(x, a, b) -> float | None:
    """The first x where curve a stops being below (or above) curve b, interpolated in log-log space;
    None if one stays below the other over the whole range. Exact ties count as the crossover."""
    x, a, b = (np.asarray(v, float) for v in (x, a, b))
    order = np.argsort(x)
    x, d = x[order], np.log(a[order]) - np.log(b[order])
    for i in range(len(x)):
        if d[i] == 0:
            return float(x[i])
        if i and np.sign(d[i]) != np.sign(d[i - 1]):
            lx0, lx1 = math.log(x[i - 1]), math.log(x[i])
            return float(math.exp(lx0 + (lx1 - lx0) * d[i - 1] / (d[i - 1] - d[i])))
    return None

