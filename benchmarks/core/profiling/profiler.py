"""Where the time goes: an operator breakdown of any case, in the paper's terms.

    attention-bench profile --area models --param model=transformer --param preset=paper-base --param seq_len=64
    attention-bench profile --set default --out results/runs/<machine>-default

For one case and method (a grid case, by its parameters) this runs torch.profiler over warm calls and
groups its events by the ``record_function`` labels the models carry (embedding, Q/K/V projections,
scores, softmax, weights·V or the fused kernel, W_O, add & norm, FFN, GRU steps, additive attention,
readout, generator, ...) into components. Per component: self time and share of the call, calls, matmul
FLOPs (counted on the executed operators with torch's FLOP formulas, and checked equal to the analytic
model ``transformer.flops`` component by component), achieved FLOP/s and operator launches.

How it is measured:

- **Time.** ``torch.profiler.schedule(wait=2, warmup=1, active=1, repeat=cycles)``, five cycles or as many as
  fit in 4 s at the speed of the case's first call, at least two (``cycles_for``): each cycle has two
  calls with the profiler off (the second is timed: the first runs with caches cold from the previous
  cycle's trace processing), one warm-up and one profiled call, so unprofiled and profiled calls
  alternate under the same machine load. A component's time is the self time of its label (the
  label's span minus the spans of the labels nested in it), so the components partition the profiled
  call exactly; time outside every label is ``unlabelled``. A shared machine only ever slows a call
  down, so the breakdown is that of the fastest profiled call (the least disturbed), and the
  profiler's own overhead is the fastest profiled call over the fastest unprofiled one, minus 1
  (medians are stored too). A component time includes its share of that overhead (many small
  operators pay more of it).
- **Memory and trace.** One more profiled call with shapes and memory recorded writes a gzipped
  Chrome/Perfetto trace (``trace.json.gz``: open it in ui.perfetto.dev or chrome://tracing) and gives
  the peak of the bytes allocated during the call and what holds them at that moment, by the label
  that allocated them (for example the h·n² attention weights of the ``math`` backend). On a GPU the
  CUDA caching allocator's history is saved too (``cuda_memory.pickle``, for pytorch.org/memory_viz).
- **Graph.** ``benchmarks.opgraph`` records the executed operators once: sequential depth, launches and
  matmul FLOPs per label.

Each profile is written as ``<out>/profiles/<case>/profile.json`` (atomically) next to its trace and
memory figure; a named set resumes, skipping cases already profiled at this commit.
"""

from __future__ import annotations

import datetime as dt
import gzip
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch._C._profiler import _EventType  # the profiler's event kinds: no public name
from torch.profiler import ProfilerActivity, profile, schedule
from tqdm import tqdm

from ... import cases
from .. import opgraph, records
from ..hardware import machine
from ..records import UnreadableRecord, case_key, classify_failure, commit, read_json, write_json_atomic
from .components import (  # noqa: F401 (the profile's terms, read through this module too)
    COMPONENTS,
    GLUE,
    GROUPING,
    MATMUL_COMPONENTS,
    UNLABELLED,
    analytic_by_component,
    analytic_component,
    component,
)

#: the most the components may differ from the unprofiled call before a profile is flagged
SUM_TOLERANCE = 0.10
#: cycles (each two unprofiled calls, a warm-up and a profiled call) a case gets unless told: as many as fit in
#: CYCLE_BUDGET_S at the speed of its first call, between MIN_CYCLES and MAX_CYCLES. A slow call is less disturbed
#: in proportion by a moment of contention, and its few profiled calls still give the fastest of them; a
#: paper-base forward pass (0.6 s) takes 2 cycles, 8 s less than 5
CYCLE_BUDGET_S, MIN_CYCLES, MAX_CYCLES = 4.0, 2, 5


# -- time ------------------------------------------------------------------------------------------

def _span_ns(e) -> int:
    return e.end_time_ns - e.start_time_ns


def _label_children(e) -> list:
    """The nearest record_function label descendants of event ``e`` (the profiler's raw event tree)."""
    out = []
    for c in e.children:
        out.extend([c] if c.tag == _EventType.TorchOp and _is_label(c) else _label_children(c))
    return out


def _self_times(step) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds per component in one profiled call (the ProfilerStep event of the raw event tree), and label
    instances. The raw tree, not ``prof.events()``: the times are the same, and building torch's FunctionEvents for
    every operator costs up to a second per profiled call of a model, 10-100 times what walking the tree does."""
    times: dict[str, float] = defaultdict(float)
    calls: Counter = Counter()

    def visit(e, path: tuple[str, ...]):
        labels = _label_children(e)
        inner = sum(_span_ns(c) for c in labels)
        key = component(path) if path else UNLABELLED
        times[key] += (_span_ns(e) - inner) * 1e-9
        for c in labels:
            calls[component(path + (c.name,))] += 1
            visit(c, path + (c.name,))

    visit(step, ())
    return dict(times), dict(calls)


def _device_times(events) -> dict[str, float]:
    """GPU kernel seconds per component: each operator's own kernels, under the labels around it."""
    times: dict[str, float] = defaultdict(float)
    for e in events:
        if e.is_user_annotation or not e.self_device_time_total:
            continue
        path, p = [], e.cpu_parent
        while p is not None:
            if p.is_user_annotation and not p.name.startswith("ProfilerStep"):
                path.append(p.name)
            p = p.cpu_parent
        times[component(tuple(reversed(path)))] += e.self_device_time_total * 1e-6
    return dict(times)


def quiet_kineto(device: str) -> None:
    """Kineto, torch.profiler's tracer, prints two lines ("USDT: ... profiler_start", "profiler_stop") on
    every profiler session at each of its log levels but the highest (torch 2.13), which breaks the
    progress bar of a profiled set into hundreds of lines. Profiling on the CPU, nothing else it logs is
    needed (torch's own collector records the CPU's events), so this raises its level (read once, when
    it first starts) unless KINETO_LOG_LEVEL is set; on a GPU its CUPTI errors matter, and it keeps them."""
    if device == "cpu":
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")


def cycles_for(seconds: float) -> int:
    """How many cycles fit in CYCLE_BUDGET_S for a call of ``seconds`` (MIN_CYCLES to MAX_CYCLES)."""
    return max(MIN_CYCLES, min(MAX_CYCLES, int(CYCLE_BUDGET_S // (4 * max(seconds, 1e-9)))))


def profile_times(fn: Callable[[], Any], device: str, cycles: int | None = None) -> dict:
    """Alternate unprofiled and profiled calls of ``fn`` (warm) and break the profiled ones into components;
    ``cycles`` of them, or (None) as many as ``cycles_for`` its first call."""
    quiet_kineto(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    per_call: list[dict[str, float]] = []
    per_call_device: list[dict[str, float]] = []
    calls: dict[str, int] = {}

    def ready(prof):
        nonlocal calls
        steps = [e for e in prof.profiler.kineto_results.experimental_event_tree()
                 if e.name.startswith("ProfilerStep")]
        if steps:
            t, calls = _self_times(max(steps, key=lambda e: e.start_time_ns))
            per_call.append(t)
            if device == "cuda":
                per_call_device.append(_device_times(prof.events()))

    walls = {"wait": [], "active": []}
    # the first call after a profiled one runs with caches cold from processing its trace: not timed
    phases = ["settle", "wait", "warmup", "active"]
    first = time.perf_counter()
    fn()
    cycles = cycles or cycles_for(time.perf_counter() - first)
    with warnings.catch_warnings(), profile(
            activities=activities, schedule=schedule(wait=2, warmup=1, active=1, repeat=cycles),
            on_trace_ready=ready) as prof:
        warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")
        for i in range(len(phases) * cycles):
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            if phases[i % len(phases)] in walls:
                walls[phases[i % len(phases)]].append(elapsed)
            prof.step()
    # a shared machine only ever slows a call down: the fastest calls are the least disturbed, so the
    # breakdown is the profiled call with the smallest total, compared with the fastest unprofiled call
    fastest = min(range(len(per_call)), key=lambda i: sum(per_call[i].values()))
    out = {"unprofiled_s": min(walls["wait"]), "profiled_s": min(walls["active"]),
           "unprofiled_median_s": statistics.median(walls["wait"]),
           "profiled_median_s": statistics.median(walls["active"]),
           "cycles": len(per_call), "times": per_call[fastest], "calls": calls}
    out["overhead"] = out["profiled_s"] / out["unprofiled_s"] - 1
    if per_call_device:
        names = sorted({k for t in per_call_device for k in t})
        out["device_times"] = {k: statistics.median(t.get(k, 0.0) for t in per_call_device) for k in names}
    return out


# -- memory and trace -------------------------------------------------------------------------------

def _memory_at_peak(prof) -> dict:
    """Peak bytes allocated during the profiled call above its start, and the live bytes at that moment
    by the component that allocated them."""
    live: dict[tuple[str, int], tuple[int, str]] = {}  # (device, ptr) -> (bytes, component)
    peak, peak_at, current, holders = 0, None, 0, {}
    timeline = []

    def walk(e, path):
        nonlocal peak, peak_at, current, holders
        if e.tag == _EventType.Allocation:
            f = e.extra_fields
            key = (str(f.device), f.ptr)
            if f.alloc_size > 0:
                live[key] = (f.alloc_size, component(path) if path else UNLABELLED)
                current += f.alloc_size
            elif key in live:
                current -= live.pop(key)[0]
            timeline.append((e.start_time_ns, current))
            if current > peak:
                peak, peak_at = current, e.start_time_ns
                by: Counter = Counter()
                for size, comp in live.values():
                    by[comp] += size
                holders = dict(by)
            return
        name = e.name
        inner = path + (name,) if e.tag == _EventType.TorchOp and _is_label(e) else path
        for c in e.children:
            walk(c, inner)

    roots = sorted(prof.profiler.kineto_results.experimental_event_tree(), key=lambda e: e.start_time_ns)
    for r in roots:
        walk(r, ())
    t0 = timeline[0][0] if timeline else 0
    return {"peak_bytes": peak, "by_component": holders,
            "timeline": [[(t - t0) * 1e-9, b] for t, b in _thin(timeline)]}


def _is_label(e) -> bool:
    name = e.name
    return not name.startswith(("aten::", "profiler::", "ProfilerStep")) and "::" not in name


def _thin(points: list, keep: int = 400) -> list:
    """At most ``keep`` points of a timeline, always keeping its maximum."""
    if len(points) <= keep:
        return points
    stride = len(points) / keep
    top = max(range(len(points)), key=lambda i: points[i][1])
    chosen = sorted({int(i * stride) for i in range(keep)} | {top, len(points) - 1})
    return [points[i] for i in chosen]


def profile_memory_and_trace(fn: Callable[[], Any], device: str, folder: str) -> dict:
    """One warm call profiled with shapes and memory: a gzipped trace, and memory at the peak."""
    quiet_kineto(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    fn()
    if device == "cuda":
        torch.cuda.memory._record_memory_history(max_entries=100000)
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        fn()
    if device == "cuda":
        torch.cuda.memory._dump_snapshot(os.path.join(folder, "cuda_memory.pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    trace = os.path.join(folder, "trace.json.gz")
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(trace + ".tmp", "wb") as dst:
            shutil.copyfileobj(src, dst)
    os.replace(trace + ".tmp", trace)
    return _memory_at_peak(prof)


# -- one case ---------------------------------------------------------------------------------------

def _fused(graph: opgraph.OpGraph) -> bool:
    return any("attention.sdpa" in op.labels for op in graph.ops)


def profile_case(area: str, params: dict, method: str, out: str, *, cycles: int | None = None) -> dict:
    """Profile one method of one grid case into ``<out>/profiles/<case>/``; returns the record. Its memory
    timeline is drawn by the report (``memory_figure`` names the file)."""
    folder = os.path.join(out, "profiles", case_key(area, method, params))
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    case = cases.build(area, params)
    fn, work, tokens = case.work(method)
    with machine.using_threads(case.threads):
        graph = opgraph.record(fn)
        timed = profile_times(fn, case.device, cycles)
        memory = profile_memory_and_trace(fn, case.device, folder)
        threads = torch.get_num_threads()
    fused = _fused(graph)
    analytic = analytic_by_component(case, method, fused)
    counted = graph.flops_by(component)
    launches = graph.launches_by(component)
    measured = timed.get("device_times") if case.device == "cuda" else timed["times"]
    total = sum(measured.values())
    rows = []
    for name in sorted(set(measured) | set(counted) | set(analytic), key=lambda k: -measured.get(k, 0.0)):
        t = measured.get(name, 0.0)
        flops = analytic.get(name, 0)
        rows.append({"component": name, "time_s": t, "share": t / total if total else float("nan"),
                     "calls": timed["calls"].get(name, 0), "launches": launches.get(name, 0),
                     "analytic_matmul_flops": flops, "counted_matmul_flops": counted.get(name, 0),
                     "achieved_flops_per_s": flops / t if t and flops else None,
                     "matmul_component": name in MATMUL_COMPONENTS})
    record = {
        "area": area, "method": method, "params": params, "device": case.device, "dtype": case.dtype,
        "threads": threads if case.device == "cpu" else None, "commit": commit(),
        "regime": records.regime(),  # the runtime settings it was profiled in (the page's conditions)
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(), "tokens": tokens,
        "unprofiled_s": timed["unprofiled_s"], "profiled_s": timed["profiled_s"], "overhead": timed["overhead"],
        "unprofiled_median_s": timed["unprofiled_median_s"], "profiled_median_s": timed["profiled_median_s"],
        "cycles": timed["cycles"], "components_total_s": total,
        "sum_over_unprofiled": total / timed["unprofiled_s"],
        "sum_within_tolerance": abs(total / timed["unprofiled_s"] - 1) <= SUM_TOLERANCE,
        "matmul_flops": work.matmul_total, "flops_match_analytic": counted == analytic,
        "sequential_depth": graph.depth, "op_launches": graph.launches,
        "peak_bytes": memory["peak_bytes"], "memory_by_component": memory["by_component"],
        "memory_timeline": memory["timeline"], "components": rows,
        "trace": "trace.json.gz", "memory_figure": "memory.png",
    }
    write_json_atomic(os.path.join(folder, "profile.json"), record)
    return record


def load(folder: str) -> list[dict]:
    """Every profile record under ``<folder>/profiles/`` (a runner output folder). One that cannot be read
    (cut short, say) or cannot be right (``records.profile_problem``) is left out with a warning naming it;
    the rest are read."""
    out = []
    base = os.path.join(folder, "profiles")
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        path = os.path.join(base, name, "profile.json")
        if os.path.exists(path):
            try:
                record = read_json(path)
                why = records.profile_problem(record)
                if why:
                    raise UnreadableRecord(f"{path}: {why}")
                out.append({**record, "folder": os.path.join("profiles", name)})
            except UnreadableRecord as error:
                print(f"warning: {error}; this profile is left out (profile the case again to replace it)",
                      file=sys.stderr)
    return out


def run_set(name: str | list[tuple[str, dict, str]], out: str, *, cycles: int | None = None, progress: bool = True
            ) -> dict[str, int]:
    """Profile every case of a named set (``cases.PROFILE_SETS``), or of a list of (area, params, method),
    into ``out``, skipping those already profiled at this commit; a case that fails is reported and the set
    goes on."""
    todo = cases.profile_set(name) if isinstance(name, str) else name
    counts = Counter()
    here = commit()
    for area, params, method in tqdm(todo, desc=f"profiling ({name if isinstance(name, str) else len(todo)})",
                                     unit="case", disable=not progress,
                                     file=sys.stderr):
        path = os.path.join(out, "profiles", case_key(area, method, params), "profile.json")
        if os.path.exists(path):
            try:
                done = read_json(path)
            except UnreadableRecord:  # cut short: profiled again, and replaced
                done = {}
            if done.get("commit") == here and not records.profile_problem(done):
                counts["resumed"] += 1
                continue
        try:
            profile_case(area, params, method, out, cycles=cycles)
            counts["ok"] += 1
        except Exception as error:  # recorded, never fatal
            status, reason = classify_failure(error)
            counts[status] += 1
            print(f"{case_key(area, method, params)}: {status}: {reason}", file=sys.stderr)
    return dict(counts)


def run_set_fresh(name: str | list[tuple[str, dict, str]], out: str, *, cycles: int | None = None,
                  progress: bool = True) -> dict[str, int]:
    """``run_set`` in a fresh process (spawned: a new interpreter), so that the cases are profiled in the users'
    regime whatever this process has done: a calibration at other thread counts sets torch's threads, and
    setting them slows small operators for the rest of the process."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        counts = pool.apply(run_set, (name, out), {"cycles": cycles, "progress": progress})
        # the worker ends on its own: the pool's exit terminates a worker still alive, and one killed while it
        # cleans up leaves the run's shutdown warning of a leaked semaphore (tqdm's lock, unlinked, not unregistered)
        pool.close()
        pool.join()
    return counts

