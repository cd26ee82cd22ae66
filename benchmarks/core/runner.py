"""The in-process runner: sweep a grid's cases in one process with torch.utils.benchmark.

asv spawns a process per benchmark and parameter combination, which is right for history but slow
for a sweep; this runner reads the same cases (``benchmarks.cases``) and measures them with the same
code as asv's tracks (``benchmarks.core.measure``). Each case's records are written as soon as the case
finishes, atomically, one JSON file per (area, method, params) under ``<out>/cases/``; a second run
into the same folder resumes, skipping what is there. A case that cannot run on this machine is
recorded as ``skipped``, one that runs out of memory as ``oom`` and any other error as ``failed``,
each with its reason; the sweep goes on. A record that cannot be read (cut short, say) is moved to
``<out>/set-aside/``, named in the run's summary, and its case is measured again.

With ``--rounds R`` each method is timed in R rounds spread over the whole run (R passes over the grid,
``min_run_time / R`` seconds each), its record rewritten after each round: on a shared machine whose
speed changes over seconds, two such runs agree more closely than two runs of one long timing each.

The command lines that use it (``python -m benchmarks.runner``, ``python -m reports``) share their
options and sequence through ``benchmarks.core.pipeline``; ``benchmarks.core.ranks`` spreads a grid over
torchrun's ranks.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterable

import torch
from tqdm import tqdm

from .. import cases
from . import constants, guards, machine, measure, records
from .records import (
    STATUSES,
    UnreadableRecord,
    case_key,
    classify_failure,
    commit,
    git_head,
    read_json,
    set_aside,
    write_json_atomic,
)

#: a timed case whose spread (IQR over median) passes this is flagged noisy in the summary and on the page
NOISY = 0.10


def plan(grid: str, areas: Iterable[str] | None = None, devices: Iterable[str] | None = None) -> list[tuple[str, dict]]:
    """The (area, params) cases of a grid, optionally restricted to some areas and devices."""
    if grid not in cases.GRIDS:
        raise ValueError(f"unknown grid {grid!r}; allowed: {', '.join(cases.GRIDS)}")
    known = list(cases.GRIDS[grid])
    areas = known if areas is None else list(areas)
    for a in areas:
        if a not in known:
            raise ValueError(f"unknown area {a!r}; allowed: {', '.join(known)}")
    devices = None if devices is None else set(devices)
    for d in devices or ():
        if d not in ("cpu", "cuda"):
            raise ValueError(f"unknown device {d!r}; allowed: 'cpu', 'cuda'")
    guards.check_devices(devices)
    out = []
    for area in areas:
        for params in cases.combinations(area, grid):
            if devices is None or params.get("device", "cpu") in devices:
                out.append((area, params))
    return out


class Runner:
    """Measure cases into ``out``: ``machine.json`` (metadata, GEMM peaks) and ``cases/*.json``."""

    def __init__(self, out: str, *, min_run_time: float = 0.2, telemetry_time: float = 1.0,
                 name: str | None = None, rounds: int = 1, quick_constants: bool = False):
        guards.check_seconds("min_run_time", min_run_time)
        guards.check_seconds("telemetry_time", telemetry_time)
        self.rounds = guards.check_count("rounds", rounds, guards.MAX_ROUNDS)
        self.out, self.min_run_time, self.telemetry_time = out, min_run_time, telemetry_time
        self.quick_constants = quick_constants  # the performance model's constants on a coarse grid (seconds)
        self._built: dict[str, cases.Prepared] = {}  # with several rounds, each CPU case built once (_build)
        self.cases_dir = guards.writable_folder(os.path.join(out, "cases"), "the run folder's cases/ in")
        self.commit = commit()
        # a record without a commit is still a measurement: reports label it by its folder and date
        self.commit_error = None if self.commit else git_head()[1]
        self.name = name or socket.gethostname()  # the machine's label in reports
        self.set_aside: list[str] = []  # unreadable records moved out of the way by this run
        self.records: list[dict] = []  # the records this run wrote
        self.current: str | None = None  # the case being measured
        self.counts: dict[str, int] = {}  # records of each status this run wrote (so far, if interrupted)
        self.written: dict[str, dict] = {}  # each record this run wrote, its latest version, by file name

    def path(self, key: str) -> str:
        return os.path.join(self.cases_dir, key + ".json")

    def _read(self, path: str, check=None) -> dict | None:
        """A record, or None after setting aside (and naming on stderr) one that cannot be read or that
        ``check`` finds wrong (``records.problem``: a negative time, an unknown status, FLOP/s that are not
        the FLOPs over the time, ...): its case is measured again."""
        try:
            record = read_json(path)
            why = check(record) if check else records.case_problem(path, record)
            if why:
                raise UnreadableRecord(f"{path}: {why}")
        except UnreadableRecord as error:
            moved = set_aside(path, os.path.join(self.out, "set-aside"))
            self.set_aside.append(moved)
            print(f"warning: {error}; set aside as {moved}, measured again", file=sys.stderr)
            return None
        return record

    def recorded(self, area: str, method: str, params: dict) -> tuple[int, dict | None]:
        """How many of this run's rounds the method's record already holds, and the record: 0 for none, one
        of another commit or of a run with another number of rounds, or one that cannot be read; all of
        them for a record that is not a time (skipped, failed, a graph)."""
        path = self.path(case_key(area, method, params))
        record = self._read(path) if os.path.exists(path) else None
        if record is None or record.get("commit") != self.commit or record.get("rounds_planned", 1) != self.rounds:
            return 0, None
        if record.get("status") != "ok" or "time_median_s" not in record:
            return self.rounds, record
        return len(record.get("rounds", [None])), record

    def rounds_left(self, area: str, params: dict) -> int:
        """Method-rounds of the case still to time: 0 when every method already has a record of this commit
        with all of this run's rounds (a resumed run skips the case)."""
        return sum(self.rounds - self.recorded(area, m, params)[0] for m in cases.METHODS[area])

    def calibrate(self, threads: list[int], again: bool = False) -> dict[str, float]:
        """The machine's GEMM peaks for this run (``machine.json``, with the performance model's constants,
        ``machine_constants``): measured at its start, reused on resume;
        ``again`` (at the end of a run that measured something) measures them once more and keeps each key's
        best of every calibration (``calibrations`` lists them), so that a calibration slowed by another
        process does not stand as the machine's peak."""
        path = os.path.join(self.out, "machine.json")
        saved = self._read(path, records.peaks_problem) if os.path.exists(path) else None
        if saved is not None and saved.get("commit") == self.commit and not again:
            keys = {machine.peak_key("cpu", "float32", t) for t in (None, *threads)}
            if set(saved["gemm_peaks"]) >= keys and set(saved.get("constants", {})) >= keys:
                return saved["gemm_peaks"]
        fresh = machine.calibrate(threads, fresh=again)
        # every calibration of this commit's run stays (a resume that adds the constants loses none)
        earlier = saved.get("calibrations", [saved["gemm_peaks"]]) if saved and (
            again or saved.get("commit") == self.commit) else []
        calibrations = [*earlier, fresh]
        peaks = machine.best_peaks(*calibrations)
        kept = saved.get("constants", {}) if saved and saved.get("commit") == self.commit else {}
        write_json_atomic(path, {"machine": machine.metadata(), "gemm_peaks": peaks, "calibrations": calibrations,
                                 "constants": {**machine_constants(threads, kept, self.quick_constants), **kept},
                                 "commit": self.commit, "commit_error": self.commit_error, "name": self.name})
        return peaks

    def write(self, area: str, method: str, params: dict, status: str, reason: str | None, started: float,
               metrics: dict | None = None, previous: dict | None = None) -> dict:
        """Write one record; after a further round, ``previous`` (the record so far) keeps its start time
        and its duration adds up."""
        record = {"area": area, "method": method, "params": params, "status": status, "reason": reason,
                  "commit": self.commit, "machine": self.name,
                  "started_at": previous["started_at"] if previous else
                  dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(),
                  "duration_s": time.time() - started + (previous["duration_s"] if previous else 0.0),
                  "min_run_time": self.min_run_time, "rounds_planned": self.rounds,
                  "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                  # which of torchrun's ranks measured it (0 of 1 without torchrun)
                  "rank": int(os.environ.get("RANK", 0)), "world_size": int(os.environ.get("WORLD_SIZE", 1)),
                  **(metrics or {})}
        write_json_atomic(self.path(case_key(area, method, params)), record)
        self.written[case_key(area, method, params)] = record
        return record

    def _build(self, area: str, params: dict) -> cases.Prepared:
        """The case, built from seed 0. In a run of several rounds a CPU case is built once and kept for the
        run (all of the default CPU grid: about 2.4 GB); a GPU case is built again each round (the same
        weights and inputs), so that cases kept alive never take the GPU memory a later case needs."""
        key = case_key(area, "", params)
        if key in self._built:
            return self._built[key]
        torch.manual_seed(0)
        case = cases.build(area, params)
        if self.rounds > 1 and case.device == "cpu":
            self._built[key] = case
        return case

    def run_case(self, area: str, params: dict, peaks: dict[str, float], round_: int = 1) -> list[dict]:
        """Build one case and measure each of its methods that lacks round ``round_`` (of ``rounds``; each
        round times ``min_run_time / rounds`` seconds), writing one record per method. A case with nothing
        left to measure in this round is not built."""
        pending = {}  # method -> its record after the earlier rounds (None: none yet)
        for method in cases.METHODS[area]:
            have, previous = self.recorded(area, method, params)
            if have < round_:
                pending[method] = previous
        if not pending:
            return []
        started = time.time()
        try:
            case = self._build(area, params)
        except Exception as error:  # recorded, never fatal
            status, reason = classify_failure(error)
            return [self.write(area, m, params, status, reason, started) for m in pending]
        records = []
        for method, previous in pending.items():
            started = time.time()
            if method not in case.methods():
                records.append(self.write(area, method, params, "skipped", f"no {method} for this case", started))
                continue
            try:
                peak = peaks.get(machine.peak_key(case.device, case.dtype, case.threads))
                metrics = measure.measure(case, method, min_run_time=self.min_run_time / self.rounds, peak=peak,
                                          telemetry_time=self.telemetry_time, previous=previous)
                records.append(self.write(area, method, params, "ok", None, started, metrics, previous))
            except Exception as error:
                status, reason = classify_failure(error)
                records.append(self.write(area, method, params, status, reason, started))
                if case.device == "cuda":
                    torch.cuda.empty_cache()
        return records

    def run(self, todo: list[tuple[str, dict]], progress: bool = True) -> dict[str, int]:
        """Measure every case not yet recorded; returns how many records of each status were written."""
        threads = sorted({p["threads"] for a, p in todo if "threads" in p})
        busy = machine_busy()
        if busy:
            print(f"warning: {busy}", file=sys.stderr)
        peaks = self.calibrate(threads)
        counts = dict.fromkeys(STATUSES, 0)
        left = [self.rounds_left(a, p) for a, p in todo]  # each record read once here
        remaining = [case for case, n in zip(todo, left) if n]
        counts["resumed"] = len(todo) - len(remaining)
        # progress in timed method-rounds, not cases: each costs at least min_run_time / rounds, so the time
        # left that tqdm estimates follows the work left
        steps = sum(left)
        methods = sum(len(cases.METHODS[a]) for a, _ in remaining)
        if progress:  # the header counts what the bar counts
            rounds = f" in {self.rounds} interleaved rounds ({steps} method-rounds)" if self.rounds > 1 else ""
            print(f"{len(todo)} cases: {counts['resumed']} already recorded, {len(remaining)} to measure "
                  f"({methods} methods, at least {self.min_run_time:g} s of timing each{rounds}: at least "
                  f"{methods * self.min_run_time:.0f} s of timing in all, building and controls aside)",
                  file=sys.stderr)
        # smoothing=0: the rate over the whole run so far, not the last few methods (a run mixes millisecond
        # and second-long methods, so a moving rate swings the time left several-fold)
        bar = tqdm(total=steps, desc="measuring", unit="method" if self.rounds == 1 else "method-round",
                   disable=not progress, file=sys.stderr, smoothing=0)
        self.written = final = {}  # every record written from here on, however the run ends
        self.counts = counts  # what an interrupted run has done so far (filled in below, however it ends)
        try:
            with bar:
                # round by round over the whole grid: each case's rounds are spread over the run, so that a
                # slow spell of a shared machine hits one round of many cases rather than every round of a few
                for round_ in range(1, self.rounds + 1):
                    for area, params in remaining:
                        self.current = case_key(area, "", params).replace("----", " ") + (
                            f" (round {round_} of {self.rounds})" if self.rounds > 1 else "")
                        bar.set_postfix_str(self.current[:70])
                        for record in self.run_case(area, params, peaks, round_):
                            timed = record["status"] == "ok" and "time_median_s" in record
                            bar.update(1 if timed else self.rounds - round_ + 1)  # nothing more to time for it
        finally:
            self._built.clear()
            for record in final.values():
                counts[record["status"]] += 1
            self.records.extend(final.values())
        self.current = None
        if final and int(os.environ.get("RANK", 0)) == 0:  # calibrated again now that the run is over (rank 0
            self.calibrate(threads, again=True)           # writes machine.json): the best of the two stands
        return counts

    def summary(self, counts: dict[str, int]) -> str:
        """The run on one screen: what was measured, skipped (why), out of memory, failed (why), noisy,
        set aside, and where the results are."""
        return summary(self.out, self.records, counts, self.set_aside)


#: other processes using more than this share of the cores (while this one waits) make a busy machine
BUSY_SHARE = 0.5
#: seconds the busy check watches the cores for, before every run
BUSY_SAMPLE_S = 0.5


def machine_constants(threads: list[int], skip: Iterable[str] = (), quick: bool = False) -> dict[str, dict]:
    """The performance model's constants (``constants.measure``; ``quick``: its coarse grid) of every device
    and dtype this machine has, the CPU at its default thread count and at each of ``threads``, by
    ``machine.peak_key``; the keys in ``skip`` are not measured."""
    out = {}
    for t in sorted({torch.get_num_threads(), *threads}):
        key = machine.peak_key("cpu", "float32", t)
        if key not in skip:
            with cases.using_threads(t):
                out[key] = constants.measure("cpu", "float32", quick)
    for dtype in machine.GEMM_DTYPES["cuda"] if torch.cuda.is_available() else ():
        key = machine.peak_key("cuda", dtype, None)
        if key not in skip:
            out[key] = constants.measure("cuda", dtype, quick)
    return out


def cpu_busy(seconds: float = 0.5) -> float | None:
    """Share of all cores that other processes use over the next ``seconds`` (while this one sleeps): what
    others are using now. None where /proc/stat is not there."""
    before = machine.cpu_counters()
    time.sleep(seconds)
    return machine.others_cpu_share(before, machine.cpu_counters())


def machine_busy() -> str | None:
    """A sentence when the machine is already busy as a run starts (others use more than BUSY_SHARE of
    the cores, measured over half a second; the load average lags a minute behind and would flag the
    run that just ended), else None: times measured now will be slower and noisier."""
    busy = cpu_busy(BUSY_SAMPLE_S)
    if busy is None or busy <= BUSY_SHARE:
        return None
    cores = os.cpu_count() or 1
    return (f"this machine is already busy (other processes use {busy:.0%} of its {cores} cores); times "
            f"measured now are slower and noisier: wait for it to quieten, or compare normalised times")


def _why(records: list[dict], limit: int = 3) -> str:
    reasons = Counter(r["reason"] for r in records)
    told = [f"{n} × {reason}" for reason, n in reasons.most_common(limit)]
    return "; ".join(told) + (f"; {len(reasons) - limit} other reasons" if len(reasons) > limit else "")


def _worst(items: list[tuple], shown, limit: int = 3) -> str:
    """': key (value), ... and N more' for the first ``limit`` of (value, key) pairs, worst first; '' if none."""
    if not items:
        return ""
    listed = ", ".join(f"{key} ({shown(value)})" for value, key in items[:limit])
    return f": {listed}" + (f", and {len(items) - limit} more" if len(items) > limit else "")


def summary(out: str, records: list[dict], counts: dict[str, int], set_aside: list[str]) -> str:
    """See Runner.summary; ``records``: those this run wrote."""
    by = {s: [r for r in records if r["status"] == s] for s in STATUSES}
    noisy = sorted((r["time_iqr_s"] / r["time_median_s"], case_key(r["area"], r["method"], r["params"]))
                   for r in by["ok"] if r.get("time_median_s") and r.get("time_iqr_s") is not None
                   and r["time_iqr_s"] / r["time_median_s"] > NOISY)[::-1]
    lines = [f"Run summary ({out})",
             f"  measured       {counts.get('ok', 0)}",
             f"  resumed        {counts.get('resumed', 0)} cases already recorded at this commit"]
    for status, label in (("skipped", "skipped"), ("oom", "out of memory"), ("failed", "failed")):
        lines.append(f"  {label:14s} {counts.get(status, 0)}" + (f": {_why(by[status])}" if by[status] else ""))
    lines.append(f"  noisy          {len(noisy)} with IQR/median > {NOISY:.0%}"
                 + _worst(noisy, lambda rel: f"{rel:.0%}"))
    thin = sorted((r["time_median_s"], case_key(r["area"], r["method"], r["params"])) for r in by["ok"]
                  if r.get("time_median_s") and r.get("samples") is not None
                  and r["samples"] < measure.MIN_SAMPLES)[::-1]
    lines.append(f"  unreplicated   {len(thin)} timed over fewer than {measure.MIN_SAMPLES} values, "
                 "so no spread measured"
                 + (" (--rounds R times each R times, spread over the run)" if thin else "")
                 + _worst(thin, lambda t: f"{t:.2g} s"))
    lines.append(f"  set aside      {len(set_aside)}"
                 + (f" unreadable records: {', '.join(set_aside)}" if set_aside else ""))
    lines.append(f"  results in     {out} (machine.json, cases/)")
    return "\n".join(lines)
