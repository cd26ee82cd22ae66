"""What every analysis returns and the helpers they share: selecting rows, holding axes, phrasing.

An analysis is a pure function from the tidy table of one machine (``reports.tidy``) to an ``Analysis``:
numbers, tables, a verdict formatted from the numbers (never written by hand) and the figures it
declares (``Figure``: which table, drawn how, with which axes). Plotting (``reports.figures``) draws
the declared figures and HTML (``reports.html``) lays them out; neither computes a result. Missing data
is reported in ``missing`` and in the verdict, never skipped silently.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

import pandas as pd

from benchmarks import cases
from benchmarks.core.timing import rerun
from transformer import PRESETS

from .. import tidy

#: the variance between runs of the analysed machine, by group of figures (``group``), that ``Analysis.interval``
#: adds to a figure's interval (``registry.run_all`` sets it from the run's ``machine.json``; empty: none)
BETWEEN: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar("between", default=None)


def group(analysis: str, number: str) -> str:
    """The group of figures whose variance between runs a figure takes: its analysis, its paired ratios apart
    (``<analysis>.paired``: timed in the same moments, they move between runs less than the grid's)."""
    return f"{analysis}.paired" if number.startswith("paired") else analysis


@dataclass
class Figure:
    """A plot an analysis asks for: ``table``'s columns as series against its index (``kind`` "lines"),
    its columns as grouped bars over its rows ("bars"), its rows as bars of stacked shares ("shares"), or
    its rows as points, columns ``x``, ``y`` and ``group`` ("scatter", log-log; with ``roof``, the roofline's
    two ceilings under them)."""

    name: str
    table: pd.DataFrame
    xlabel: str = ""
    ylabel: str = ""
    title: str = ""
    kind: str = "lines"
    #: the values are multiplied by this before plotting (1e3: seconds shown in ms)
    scale: float = 1.0
    #: a horizontal reference line (value before scaling, label)
    hline: tuple[float, str] | None = None
    #: a dotted "ideal" line: "identity" (y = x) or "one" (y = 1)
    ideal: str | None = None
    #: columns drawn dashed (the sequential counterpart of a solid one)
    dashed: tuple = ()
    #: log scales: None chooses one where the values span a decade or more
    log_x: bool | None = None
    log_y: bool | None = None
    legend_size: int = 8
    #: a roofline's ceilings: (peak FLOP/s, bandwidth bytes/s), before scaling
    roof: tuple[float, float] | None = None
    #: each point's interval ("lines"): tables shaped as ``table``, its low and high values (where a rerun of a
    #: time measured in several processes lands, ``benchmarks.core.timing.rerun``), drawn as error bars; None or
    #: NaN: no bar
    low: pd.DataFrame | None = None
    high: pd.DataFrame | None = None


@dataclass
class Analysis:
    key: str
    title: str
    claim: str
    verdict: str
    #: the answer in a line (at most about 25 words) with its key figure: the page's first table, the README
    answer: str = ""
    numbers: dict[str, float] = field(default_factory=dict)
    #: a number's interval where one was measured, by its key in ``numbers``: (low, high), where a rerun's figure
    #: lands with 95% confidence (``benchmarks.core.timing.rerun``), from the processes or sessions it was timed in
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the keys of ``numbers`` the answer quotes (``reports.reproduce`` holds the answer table's figures to them)
    quoted: list[str] = field(default_factory=list)
    #: the most a number can be (a count of n), by its key: its interval stops there, widened or not
    caps: dict[str, float] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    #: what the numbers were computed on (size, batch, device, threads, dtype), shown under every figure
    conditions: str = ""
    figures: list[Figure] = field(default_factory=list)
    #: what a table's values are, by table name (the page's caption); tables not named here are
    #: captioned by their name's prefix (``reports.html.TABLE_UNITS``)
    units: dict[str, str] = field(default_factory=dict)

    def interval(self, key: str, low: float, high: float) -> tuple[float, float]:
        """Set number ``key``'s interval from the run's own (``low``, ``high``), adding the variance between the
        machine's runs of its group where one was measured (``BETWEEN``, ``rerun.widened``); returns it."""
        self.intervals[key] = self.stated(key, low, high, (BETWEEN.get() or {}).get(group(self.key, key)))
        return self.intervals[key]

    def stated(self, key: str, low: float, high: float, between: float | None) -> tuple[float, float]:
        """Number ``key``'s own interval (``low``, ``high``) with a variance ``between`` runs added
        (``rerun.widened``; none for a value or low end that is not positive, nor for a count: a number with a cap,
        whose interval is a count's), within its cap (``caps``)."""
        value = self.numbers.get(key)
        if between and key not in self.caps and value and value > 0 and low == low and high == high and low > 0:
            low, high = rerun.widened(value, low, high, between)
        return low, min(high, self.caps.get(key, high))

    def without(self, missing: str, verdict: str) -> Analysis:
        """This analysis when its data is missing: say so in the verdict and in ``missing``."""
        self.missing.append(missing)
        self.verdict = verdict
        self.answer = verdict.split(". ")[0].rstrip(".") + "."  # its first sentence: what is missing
        return self

    def plot(self, name: str, **spec) -> None:
        """Declare a figure of table ``name`` (see ``Figure``); an empty table draws nothing."""
        table = spec.pop("table", self.tables.get(name))
        if table is not None and not table.empty:
            self.figures.append(Figure(name, table, **spec))


def time_curves(rows: pd.DataFrame, index: str, column: str) -> tuple[pd.DataFrame, dict]:
    """Time rows as curves: the median value per (``index``, ``column``) unstacked, and the figure spec's
    ``low``/``high`` tables of each point's interval over processes (empty where none was measured)."""
    grouped = rows.groupby([index, column])
    table = grouped.value.median().unstack(column)
    if "low" not in rows or rows.low.isna().all():
        return table, {}
    return table, {k: grouped[k].median().unstack(column).reindex_like(table) for k in ("low", "high")}


def ok_rows(t: pd.DataFrame, area: str, metric: str, method: str = "forward") -> pd.DataFrame:
    """The measured rows of one area, metric and method."""
    rows = t[(t.area == area) & (t.metric == metric) & (t.method == method) & (t.status == "ok")]
    return rows.dropna(subset=["value"])


def hold_axes(rows: pd.DataFrame, axes: dict[str, object]) -> tuple[pd.DataFrame, str]:
    """Hold the given axes at one value each, so that a curve never pools different cases: the preferred
    value where measured (None: no preference), else the most measured one (ties: the largest). Returns
    the rows and a phrase naming what was held, for the verdict."""
    held = []
    for axis, prefer in axes.items():
        values = rows[axis].dropna()
        if values.empty:
            continue
        counts = values.value_counts()
        choice = prefer if prefer in counts.index else max(counts.index, key=lambda v: (counts[v], v))
        rows = rows[rows[axis] == choice]
        if len(counts) > 1:
            held.append(f"{axis} {choice}")
    return rows, (f" (at {', '.join(held)})" if held else "")


def held_phrase(held: str) -> str:
    return f" Other axes held{held}." if held else ""


def devices(rows: pd.DataFrame) -> list[str]:
    """The devices of ``rows``, the CPU first."""
    return sorted(rows.device.dropna().unique(), key=lambda d: d != "cpu")


def fmt_time(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def first(values) -> object:
    """The first of ``values`` (a group's label, say), or None when there is none."""
    return next(iter(values), None)


def span(a: Analysis, key: str) -> str:
    """' (lo-hi%)' for a fraction or share with an interval (``Analysis.intervals``), else ''."""
    if key not in a.intervals:
        return ""
    low, high = a.intervals[key]
    return f" ({low:.0%}-{high:.0%})".replace("%-", "-")


def fmt_ratio(x: float) -> str:
    """'2.00×' (one decimal from 10× on)."""
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def not_measured(t: pd.DataFrame, area: str, what: str) -> str:
    """Why an analysis has no rows to read: the area was not run at all, or every one of its cases was
    skipped, out of memory or failed (with the commonest reasons); never only "no results"."""
    rows = t[(t.area == area) & t.metric.isin(["time", "sequential_depth"])]
    if rows.empty:
        return f"No {what} results: the {area} area was not run."
    if (rows.status == "ok").any():
        return f"No {what} results: the {area} area ran, but not the cases this analysis reads."
    reasons = rows.groupby(["status", "reason"], dropna=False).size().sort_values(ascending=False)
    told = "; ".join(f"{n} {status}: {reason}" for (status, reason), n in reasons.head(2).items())
    more = f"; {len(reasons) - 2} other reasons" if len(reasons) > 2 else ""
    return f"No {what} results: all {len(rows)} cases of the {area} area were run and none was measured ({told}{more})."


def gpu_missing(t: pd.DataFrame, area: str) -> list[str]:
    if (t[(t.area == area) & (t.status == "ok")].device == "cuda").any():
        return []
    return [f"no GPU results for {area}: this machine has no CUDA device, or the GPU cases were not run"]


def preset_phrase(preset: str) -> str:
    """A preset with the sizes that matter: 'tiny (d_model 32, 2+2 layers)'."""
    c = PRESETS.get(preset)
    if c is None:
        return str(preset)
    return f"{preset} (d_model {c.d_model}, {c.num_encoder_layers}+{c.num_decoder_layers} layers, h {c.num_heads})"


def conditions(rows: pd.DataFrame, *, n: bool = True, dtype: str | None = None) -> str:
    """What a verdict was computed on, from its rows: device, threads, dtype and the n range measured."""
    parts = []
    found = devices(rows)
    if found:
        parts.append("/".join(found))
    on_cpu = rows.device.astype(object).fillna("cpu") == "cpu"  # the threads area's rows name no device
    threads = rows[on_cpu].threads.dropna().unique() if "threads" in rows else []
    if len(threads):
        parts.append(f"{'/'.join(str(int(x)) for x in sorted(threads))} CPU threads")
    dtypes = rows.dtype.dropna().unique() if "dtype" in rows else []
    parts.append("/".join(sorted(map(str, dtypes))) if len(dtypes) else (dtype or "float32"))
    if n and "seq_len" in rows and rows.seq_len.notna().any():
        parts.append(f"n = {int(rows.seq_len.min())}..{int(rows.seq_len.max())}")
    runtime = rows.runtime.dropna().unique() if "runtime" in rows else []
    if len(runtime):  # the runtime settings the times were measured in (records.regime)
        parts.append("runtime " + " / ".join(sorted(map(str, runtime))))
    return ", ".join(parts)


def heads_axis() -> str:
    return f"heads h (d_model fixed at {cases.MULTIHEAD_SHAPE['d_model']})"


def case_columns(rows: pd.DataFrame, *extra: str) -> pd.DataFrame:
    """Each row's machine, area, method, the axes any row has, and ``extra``: a table of cases."""
    axes = [c for c in tidy.PARAMS if rows[c].notna().any()]
    return rows[["machine", "area", "method", *axes, *extra]].reset_index(drop=True)
