"""The benchmark areas, listed once, and the cases they define.

``AREAS`` is the registry: one line per area module (``benchmarks/bench_<area>.py``, each an ``area.Area`` and
its asv class). Everything else reads the cases through here, so a number means the same thing wherever it was
measured (the runner, asv, the gate, the pairs, the profiles, the tests): ``build(area, params)`` returns a
``Prepared`` case; ``axes``, ``combinations``, ``select``, ``on_grid``, ``method_on_grid`` and ``tokens`` answer
from the area's definition; ``GRIDS`` and ``METHODS`` are the same facts as tables. Adding an area: write its
module (see ``bench_attention.py``), add it to ``AREAS``; docs/DESIGN.md lists the steps.
"""

from __future__ import annotations

import itertools

from . import bench_attention, bench_depth, bench_layers, bench_models, bench_multihead, bench_threads
from .area import Area, Prepared, Skip, using_threads
from .bench_attention import MAX_SEQ_LEN, TOKENS
from .bench_depth import BATCH as DEPTH_BATCH
from .bench_depth import MODES
from .bench_layers import BATCH as LAYER_BATCH
from .bench_layers import HEADS as LAYER_HEADS
from .bench_layers import layer_flop_crossover, layer_flops
from .bench_models import GENERATE_STEPS, model_config
from .bench_multihead import SHAPE as MULTIHEAD_SHAPE
from .bench_threads import workload
from .ceiling import CEILING
from .grids import GRID_NAMES, PARALLEL_GRIDS, PROFILE_SETS, active_grid, profile_set, restrict, thread_counts

#: The areas, in the order runs and reports take them.
AREAS: dict[str, Area] = {a.name: a for a in (
    bench_attention.AREA,
    bench_multihead.AREA,
    bench_models.AREA,
    bench_threads.AREA,
    bench_layers.AREA,
    bench_depth.AREA,
)}

#: grid -> area -> {axis: values}
GRIDS: dict[str, dict[str, dict[str, list]]] = {g: {n: dict(a.axes[g]) for n, a in AREAS.items()} for g in GRID_NAMES}
#: area -> the methods its cases have
METHODS: dict[str, tuple[str, ...]] = {n: a.methods for n, a in AREAS.items()}

__all__ = [
    "AREAS", "CEILINGS", "DEPTH_BATCH", "GENERATE_STEPS", "GRIDS", "GRID_NAMES", "LAYER_BATCH", "LAYER_HEADS",
    "MAX_SEQ_LEN", "METHODS", "MODES", "MULTIHEAD_SHAPE", "PARALLEL_GRIDS", "PROFILE_SETS", "TOKENS", "Area",
    "Prepared", "Skip",
    "active_grid", "area", "axes", "build", "combinations", "components", "layer_flop_crossover", "layer_flops",
    "method_on_grid", "model_config", "on_grid", "profile_set", "restrict", "select", "thread_counts", "tokens",
    "using_threads", "workload",
]


#: cases built by name beside the areas' but in no grid: the GEMM that claim C2's fractions are over
CEILINGS: dict[str, Area] = {CEILING.name: CEILING}


def area(name: str) -> Area:
    """The area called ``name`` (or a ceiling: ``CEILINGS``); ValueError naming it and the areas there are."""
    if name not in AREAS and name not in CEILINGS:
        raise ValueError(f"unknown area {name!r}; allowed: {', '.join(AREAS)}")
    return AREAS.get(name) or CEILINGS[name]


def axes(name: str, grid: str | None = None) -> dict[str, list]:
    grid = active_grid() if grid is None else grid
    if grid not in GRID_NAMES:
        raise ValueError(f"unknown grid {grid!r}; allowed: {', '.join(GRID_NAMES)}")
    return dict(area(name).axes[grid])


def build(name: str, params: dict) -> Prepared:
    """Build one case of an area from its parameters (one dict of ``combinations``)."""
    return area(name).build(**params)


def tokens(name: str, params: dict, method: str = "forward") -> int:
    """Tokens one call of ``method`` processes (the throughput denominator), from the case's parameters
    alone, so that results without a record of it (asv's) get the same tokens/s as the runner's."""
    return area(name).tokens(params, method)


def on_grid(name: str, params: dict, grid: str | None = None) -> bool:
    """Whether a combination of the axes' values is one of the grid's cases (not left out by the area's
    ``keep``)."""
    return area(name).on_grid(params, active_grid() if grid is None else grid)


def method_on_grid(name: str, params: dict, method: str, grid: str | None = None) -> bool:
    """Whether ``grid`` times ``method`` of a case it has (not left out by the area's ``keep_method``)."""
    return area(name).method_on_grid(params, method, active_grid() if grid is None else grid)


def combinations(name: str, grid: str | None = None) -> list[dict]:
    """Every case of one area in a grid, as {axis: value} dicts."""
    ax = axes(name, grid)
    product = (dict(zip(ax, values, strict=True)) for values in itertools.product(*ax.values()))
    return [p for p in product if on_grid(name, p, grid)]


def select(name: str, grid: str | None = None, **fixed) -> list[dict]:
    """The cases whose axes equal the given values, e.g. ``select("attention", backend="sdpa")``."""
    unknown = set(fixed) - set(axes(name, grid))
    if unknown:
        raise ValueError(f"unknown axes {sorted(unknown)} for area {name!r}; axes: {list(axes(name, grid))}")
    return [c for c in combinations(name, grid) if all(c[k] == v for k, v in fixed.items())]


def components() -> dict[str, str]:
    """``record_function`` label -> the paper's component, over every area; ValueError where two areas give
    one label two components."""
    out: dict[str, str] = {}
    for a in AREAS.values():
        for label, comp in a.components.items():
            if out.setdefault(label, comp) != comp:
                raise ValueError(f"label {label!r} is {out[label]!r} in one area and {comp!r} in {a.name!r}")
    return out
