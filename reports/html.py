"""The HTML report: one self-contained folder (index.html, PNG figures, results.csv), from Jinja2.

``build(table, out)`` runs the analyses, draws their figures and renders ``templates/report.html.j2``.
The folder opens from disk and can be published as it is.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil

import jinja2
import pandas as pd

from benchmarks.core.hardware.machine import BUSY_SHARE
from benchmarks.core.records import write_json_atomic
from benchmarks.core.running.runner import NOISY
from benchmarks.core.timing.measure import MIN_SAMPLES

from . import claims, figures, ranges, tidy
from .analyses import noise, profiling
from .analyses import runs as run_list
from .analyses.registry import run_all
from .analyses.runs import latest_run, memory_limits

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")
#: what each report was built from, next to its index.html (so that replacing it can say what it replaced)
REPORT_RECORD = "report.json"


#: what the values of each analysis table are, by table-name prefix
TABLE_UNITS = {"time": "seconds per call (median)", "wo": "seconds per call (median); W_O cost = with/without",
               "achieved": "matmul FLOP/s", "speedup": "× over one thread", "efficiency": "speed-up / threads",
               "work": "FLOPs per call; score matrix in bytes", "exponents": "fitted power-law exponents",
               "crossover": "sequence length n (tokens); — where the curves do not cross in n_range",
               "throughput": "tokens/s",
               "factors": "time ratio = FLOP/s ratio ÷ FLOP ratio (Transformer over width-matched RNN)",
               "components": "seconds per call per component; memory held at the peak in bytes"}


def _caption(a, name: str) -> str:
    """What a table's values are: as its analysis says (``Analysis.units``), else by its name's prefix."""
    return a.units.get(name, TABLE_UNITS.get(name.split("_")[0], ""))


#: what a table shows where it has no value (NaN, None, pandas' <NA>): a dash, explained by its caption
MISSING = "—"


def displayable(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every missing cell (None, <NA>, NaN, NaT) outside float columns turned into MISSING;
    float columns keep their dtype (and their number format), their NaN shown as MISSING by the writer."""
    out = df.copy()
    for column in out.columns:
        if not pd.api.types.is_float_dtype(out[column]):
            values = out[column].astype(object)
            out[column] = values.where(values.notna(), MISSING)
    if isinstance(out.index, pd.MultiIndex):  # a case's axes: levels that are all missing say nothing
        levels = [i for i in range(out.index.nlevels) if pd.Series(out.index.get_level_values(i)).notna().any()]
        out.index = pd.MultiIndex.from_arrays(
            [[MISSING if pd.isna(v) else v for v in out.index.get_level_values(i)] for i in levels],
            names=[out.index.names[i] for i in levels]) if levels else pd.RangeIndex(len(out))
    elif out.index.hasnans:
        out.index = [MISSING if pd.isna(v) else v for v in out.index]
    return out


def _html(df: pd.DataFrame, float_format="{:.4g}".format) -> str:
    return displayable(df).to_html(float_format=float_format, na_rep=MISSING, border=0)


def _machines(t: pd.DataFrame) -> pd.DataFrame:
    cols = ["machine", "source", "env", "cpu_model", "cpu_count", "torch", "cuda", "gpu_name", "gpu_memory_bytes",
            "free_page_reporting"]
    peaks = (t[t.metric == "gemm_peak_flops_per_s"].groupby(["machine", "device", "dtype"]).value.max() / 1e9)
    m = t[cols].drop_duplicates().set_index("machine")
    for (machine, device, dtype), v in peaks.items():
        m.loc[machine, f"GEMM peak {device} {dtype} (GFLOP/s)"] = v
    return m


def _runs(t: pd.DataFrame) -> pd.DataFrame:
    """The runs (``analyses.runs.table``) with the rule the page follows: each machine's analyses read its latest
    run only."""
    runs = run_list.table(t)
    used = {latest_run(t[t.machine == m]) for m in runs.machine.unique()}
    runs.insert(0, "analysed", ["yes" if r in used else "no: an older run of this machine" for r in runs.index])
    for column in ("first", "last"):
        runs[column] = runs[column].dt.strftime("%Y-%m-%d %H:%M")
    return runs


def _between(t: pd.DataFrame) -> list[str]:
    """What each runner folder's answers' intervals add between runs (``_said``), once per distinct sentence."""
    return list(dict.fromkeys(_said(tidy.between_runs_of(run)) for run in t[t.source == "runner"].run.dropna()))


def _said(held: dict | None) -> str:
    """What a run's answers' intervals add between runs, in a short sentence (the answers table starts on the first
    screen), from its ``machine.json``'s ``between_runs``."""
    if not held or not held.get("variance"):
        return "Not included: what moves between this machine's runs (attention-bench reproduce measures it)."
    return (f"It includes what moved between {len(held.get('runs') or ())} runs of this machine (attention-bench "
            f"reproduce, {str(held.get('measured_at', '?'))[:10]}; the plots' bars do not).")


def _order(v):
    return (1, str(v), 0.0) if isinstance(v, str) else (0, "", float(v))


def _axes(t: pd.DataFrame) -> pd.DataFrame:
    """The values each area's axes took in these results (the grid that was measured)."""
    rows = []
    for area, g in t[t.area != "gemm"].groupby("area"):
        for axis in tidy.PARAMS:
            values = g[axis].dropna().unique()
            if len(values):
                rows.append({"area": area, "axis": axis, "values": ", ".join(map(str, sorted(values, key=_order)))})
    return pd.DataFrame(rows).set_index(["area", "axis"])


def _copy_profiles(records: list[dict], out: str) -> None:
    """Each profile's trace copied and its memory figure drawn into ``out/profiles/<case>/``, so that the
    report's relative links work wherever the report folder is copied."""
    for r in records:
        dest = os.path.join(out, r["folder"])
        os.makedirs(dest, exist_ok=True)
        src = os.path.join(r["root"], r["folder"], r["trace"])
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(dest, r["trace"]))
        if r.get("memory_timeline") is not None:
            stem = os.path.splitext(r["memory_figure"])[0]
            figures.save([(stem, "", figures.memory_figure(r))], dest)


def _profile_links(records: list[dict], out: str) -> list[dict]:
    links = []
    for r in records:
        params = ", ".join(f"{k} {v}" for k, v in r["params"].items() if k != "device")
        item = {"case": f"{r['area']} {r['method']}: {params} ({r['device']})", "overhead": r["overhead"],
                "depth": r["sequential_depth"], "launches": r["op_launches"]}
        for key in ("trace", "memory_figure"):
            path = os.path.join(r["folder"], r[key])
            item[key] = path if os.path.exists(os.path.join(out, path)) else None
        links.append(item)
    return links


def _plain(v):
    """A JSON-safe scalar: numpy and pandas scalars to Python, missing to None."""
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    return v.item() if hasattr(v, "item") else v


#: the fields by which a report.json is recognised as one this command wrote
REPORT_FIELDS = ("generated", "inputs", "counts", "analyses")


def is_report(out: str) -> bool:
    """``out`` is a report folder this command wrote: an index.html beside a report.json with its fields."""
    try:
        with open(os.path.join(out, REPORT_RECORD)) as f:
            saved = json.load(f)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return (isinstance(saved, dict) and all(k in saved for k in REPORT_FIELDS)
            and os.path.isfile(os.path.join(out, "index.html")))


def check_replaceable(out: str, inputs=(), what: str = "--report") -> None:
    """ValueError naming ``out`` unless a report may be written there: a new or empty folder, or a report
    folder this command wrote (``is_report``), and neither one of the results it reports on (``inputs``)
    nor a folder that holds one. A command replaces only what it made: anything else is refused before
    anything is measured or written."""
    real = os.path.realpath(out)
    for path in inputs:
        inside = os.path.realpath(path)
        if inside == real or inside.startswith(real.rstrip(os.sep) + os.sep):
            raise ValueError(f"{what} {out!r} {'is' if inside == real else 'holds'} the results "
                             f"{path!r} that the report reads: writing the report there would replace them; "
                             "give another folder (default results/report)")
    if not os.path.lexists(out):
        return
    if not os.path.isdir(out):
        raise ValueError(f"{what} {out!r} is a file, not a folder; give a new folder or a report folder")
    try:
        entries = sorted(e for e in os.listdir(out) if not e.startswith(".write-test-"))
    except OSError as error:
        raise ValueError(f"{what} {out!r}: cannot read it ({error.strerror or error})") from None
    if entries and not is_report(out):
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise ValueError(f"{what} {out!r} holds {shown}, and is not a report folder (an index.html beside the "
                         f"{REPORT_RECORD} this command writes): only a report is replaced. Give a new or empty "
                         "folder, or the folder of an earlier report")


def describe(out: str) -> str | None:
    """What the report already in folder ``out`` was built from (its ``report.json``), or None if there is
    no report there."""
    if not os.path.exists(os.path.join(out, "index.html")):
        return None
    try:
        with open(os.path.join(out, REPORT_RECORD)) as f:
            saved = json.load(f)
        ok = saved.get("counts", {}).get("ok", "?")
        return f"built {saved['generated']} from {', '.join(saved['inputs'])}, {ok} measurements ok"
    except (OSError, ValueError, KeyError):
        return "a report of unknown origin"


def build(table: pd.DataFrame, out: str, *, machine: str | None = None, asv_html: str | None = None,
          profiles: list[dict] | None = None, pairs: list[dict] | None = None, inputs: list[str] | None = None,
          extra: dict | None = None, gate: tuple[str, pd.DataFrame] | None = None,
          history: tuple[str, pd.DataFrame] | None = None, steps: pd.DataFrame | None = None) -> str:
    """Write the report for ``table`` as folder ``out``, whole or not at all; returns the path of index.html.
    ``profiles``: profile records (``benchmarks.core.profiling.profiler.load``, each with the ``root`` folder it
    was read from); ``pairs``: paired-ratio records (``reports.tidy.load_pairs``); ``inputs``: the result
    folders it was read from, recorded in ``report.json``, with ``extra``'s fields (``compare``: the runs'
    agreement); ``gate`` and ``history``: what a regression check and a paired history see on this machine against
    asv (caption, table), shown with the history; ``steps``: the steps of this machine's paired histories.
    The page is built in a folder beside ``out`` and swapped in once complete: if building fails (a full disk,
    say), the report that was in ``out`` stays as it was and the partial one is removed.
    """
    if table.empty:
        raise ValueError("the results table is empty: nothing to report")
    check_replaceable(out, inputs or ())
    staging = f"{os.path.abspath(out).rstrip(os.sep)}.building-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        _write(table, staging, machine=machine, asv_html=asv_html, profiles=profiles, pairs=pairs, inputs=inputs,
               extra=extra, gate=gate, history=history, steps=steps)
        _swap(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return os.path.join(out, "index.html")


def _swap(staging: str, out: str) -> None:
    """Put the complete folder ``staging`` in place of ``out`` (two renames; the old one is removed after)."""
    old = f"{os.path.abspath(out).rstrip(os.sep)}.replaced-{os.getpid()}"
    had = os.path.exists(out)
    if had:
        os.replace(out, old)
    try:
        os.replace(staging, out)
    except BaseException:
        if had:
            os.replace(old, out)
        raise
    if had:
        shutil.rmtree(old, ignore_errors=True)


def _write(table: pd.DataFrame, out: str, *, machine: str | None, asv_html: str | None, profiles: list[dict] | None,
           pairs: list[dict] | None, inputs: list[str] | None, extra: dict | None,
           gate: tuple[str, pd.DataFrame] | None, history: tuple[str, pd.DataFrame] | None = None,
           steps: pd.DataFrame | None = None) -> None:
    """The page, its figures, results.csv and report.json, written into the empty folder ``out``."""
    profiles = profiles or []
    _copy_profiles(profiles, out)
    table = ranges.check_table(table)  # no row of the CSV, and no figure on the page, outside its range
    results = [ranges.check(a) for a in run_all(table, machine, profiling.table(profiles), pairs)]
    sections = []
    for a in results:
        saved = figures.save(figures.figures_for(a), out)
        sections.append({"key": a.key, "title": a.title, "claim": a.claim, "verdict": a.verdict, "answer": a.answer,
                         "conditions": a.conditions,
                         "missing": a.missing, "figures": saved,
                         "numbers": _html(pd.Series(a.numbers, name="value").to_frame()) if a.numbers else None,
                         "tables": [(f"{name} — {_caption(a, name)}" if _caption(a, name) else name, _html(df))
                                    for name, df in a.tables.items() if not df.empty]})
    status = table[table.metric == "time"].groupby(["area", "method", "status"]).size().unstack("status", fill_value=0)
    not_ok = table[(table.metric == "time") & (table.status != "ok")]
    reasons = not_ok.groupby(["status", "reason"]).size().rename("cases").to_frame() if not not_ok.empty else None
    counts = table[table.metric.isin(["time", "sequential_depth"])].status.value_counts().to_dict()
    runs = _runs(table)
    noisy, thin, limits = noise.noisy_cases(table), noise.unreplicated_cases(table), memory_limits(table)
    busy, modes = noise.busy_cases(table), noise.two_mode_cases(table)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    page = env.get_template("report.html.j2").render(
        generated=dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        machine_names=list(dict.fromkeys(table.machine.dropna())),
        commits=sorted(set(runs.commit)), runs_table=_html(runs),
        counts={k: counts.get(k, 0) for k in ("ok", "skipped", "oom", "failed")},
        not_counted={k: counts.get(k, 0) for k in tidy.NOT_COUNTED},
        noisy_table=None if noisy.empty else _html(noisy),
        noisy_threshold=f"{NOISY:.0%}", unreplicated_table=None if thin.empty else _html(thin),
        unreplicated_count=len(thin), busy_table=None if busy.empty else _html(busy), busy_share=f"{BUSY_SHARE:.0%}",
        modes_table=None if modes.empty else _html(modes), modes_count=len(modes), between=_between(table),
        warnings=noise.run_warnings(runs) + noise.peak_warnings(table),
        min_samples=MIN_SAMPLES,
        memory_table=None if limits.empty else _html(limits),
        analyses=sections, status_table=_html(status), reasons=None if reasons is None else _html(reasons),
        noise_table=_html(noise.summary(table)), machine_table=_html(_machines(table)),
        axes_table=_html(_axes(table)), claims=claims.CLAIMS, profile_links=_profile_links(profiles, out),
        asv_html=asv_html, gate_caption=gate[0] if gate else None,
        gate_table=_html(gate[1].set_index(["method", "injected"])) if gate else None,
        history_caption=history[0] if history else None,
        history_table=_html(history[1].set_index("method")) if history else None,
        steps=None if steps is None else (_html(steps.set_index(["history", "commit"])) if not steps.empty else ""))
    table.to_csv(os.path.join(out, "results.csv"), index=False)
    write_json_atomic(os.path.join(out, REPORT_RECORD), {
        "kind": "report", "generated": dt.datetime.now().isoformat(timespec="seconds"),
        "inputs": inputs or sorted(set(table.run.dropna())),
        "counts": {k: int(v) for k, v in counts.items()},
        "runs": [{"run": r, "machine": row.machine, "commit": row.commit, "first": row.first, "last": row.last,
                  "rounds": _plain(row.rounds), "rounds_planned": _plain(row.rounds_planned),
                  "incomplete": _plain(row.incomplete), "busy_cases": _plain(row.busy_cases),
                  "others_cpu": row.others_cpu, "control_gemm": row.control_gemm, "runtime": _plain(row.get("runtime")),
                  "analysed": row.analysed}
                 for r, row in runs.iterrows()],
        "warnings": noise.run_warnings(runs) + noise.peak_warnings(table),
        "machine": {k: _plain(v) for k, v in table.iloc[0][["cpu_model", "cpu_count", "torch", "gpu_name"]].items()},
        "analyses": [{"key": a.key, "claim": a.claim, "title": a.title, "verdict": a.verdict, "answer": a.answer,
                      "missing": list(a.missing),
                      "has_data": bool(a.tables or a.numbers),
                      "conditions": a.conditions, "numbers": {k: _plain(v) for k, v in a.numbers.items()},
                      "intervals": {k: [_plain(lo), _plain(hi)] for k, (lo, hi) in a.intervals.items()}}
                     for a in results], **(extra or {})})
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(page)
