"""The in-process runner: sweep a grid's cases in one process with torch.utils.benchmark.

asv spawns a process per benchmark and parameter combination, which is right for history but slow
for a sweep; this runner reads the same cases (``benchmarks.cases``) and measures them with the same
code as asv's tracks (``benchmarks.core.timing.measure``). Each case's records are written as soon as the case
finishes, atomically, one JSON file per (area, method, params) under ``<out>/cases/``; a second run
into the same folder resumes, skipping what is there. A case that cannot run on this machine is
recorded as ``skipped``, one that runs out of memory as ``oom`` and any other error as ``failed``,
each with its reason; the sweep goes on. A record that cannot be read (cut short, say) is moved to
``<out>/set-aside/``, named in the run's summary, and its case is measured again.

With ``--rounds R`` each method is timed in R rounds spread over the whole run (R passes over the grid,
``min_run_time / R`` seconds each), its record rewritten after each round: on a shared machine whose
speed changes over seconds, two such runs agree more closely than two runs of one long timing each.
The command lines run each round in a fresh process (``fresh``): what one process happens to get (its
pages, its allocator's state, its place on the cores) moves a case's time by a few per cent, or by 2x
for a case whose intermediates are megabytes, and persists for the process, so a time from one process is
one draw. A case's figure is the median of R such draws (R + EXTRA_ROUNDS where they ran at two levels, or
where each faulted in pages on every call: ``Runner.unsettled_record``).

``attention-bench run`` measures through ``benchmarks.core.pipeline``; ``core.ranks.world`` spreads a grid over ranks.
"""

from __future__ import annotations

import datetime as dt
import errno
import multiprocessing
import os
import socket
import sys
import time
from collections.abc import Iterable

import torch
from tqdm import tqdm

from ... import cases
from .. import guards, records
from ..hardware import between_runs, constants_cache, machine
from ..records import (
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
from ..timing import measure
from . import child
from .run_summary import NOISY, summary  # noqa: F401 (NOISY: the page's threshold too)


def plan(grid: str, areas: Iterable[str] | None = None, devices: Iterable[str] | None = None,
         params: Iterable[str] = ()) -> list[tuple[str, dict]]:
    """The (area, params) cases of a grid, optionally restricted to some areas, devices and AXIS=VALUEs."""
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
    out = [(area, p) for area in areas for p in cases.combinations(area, grid)
           if devices is None or p.get("device", "cpu") in devices]
    return cases.restrict(out, list(params), grid)


def plan_methods(grid: str, areas: Iterable[str] | None = None, devices: Iterable[str] | None = None,
                 params: Iterable[str] = (), methods: Iterable[str] | None = None) -> list[tuple[str, dict, str]]:
    """``plan``'s cases as (area, params, method), each timed method of its area (not the graph-only ones),
    restricted to ``methods`` when given."""
    methods = None if methods is None else set(methods)
    return [(area, p, m) for area, p in plan(grid, areas, devices, params) for m in cases.METHODS[area]
            if m != "graph" and (methods is None or m in methods)]


class Runner:
    """Measure cases into ``out``: ``machine.json`` (metadata, GEMM peaks) and ``cases/*.json``."""

    def __init__(self, out: str, *, min_run_time: float = 0.2, telemetry_time: float = 1.0,
                 name: str | None = None, rounds: int = 1, quick_constants: bool = False, fresh: bool = False,
                 recalibrate: bool = False, grid: str | None = None):
        guards.check_seconds("min_run_time", min_run_time)
        guards.check_seconds("telemetry_time", telemetry_time)
        self.rounds = guards.check_count("rounds", rounds, guards.MAX_ROUNDS)
        self.out, self.min_run_time, self.telemetry_time = out, min_run_time, telemetry_time
        self.quick_constants = quick_constants  # the performance model's constants on a coarse grid (seconds)
        self.fresh = fresh  # each round in a fresh process (round_in_process), when there are several
        self.recalibrate = recalibrate  # the performance model's constants measured again, not from the cache
        self.grid = grid  # the grid the cases come from: the methods it times (the area's keep_method); None: all
        self.peaks: dict[str, float] = {}  # the run's GEMM peaks (calibrate), once it has started
        self._built: dict[str, cases.Prepared] = {}  # with several rounds, each CPU case built once (_build)
        self.cases_dir = guards.writable_folder(os.path.join(out, "cases"), "the run folder's cases/ in")
        self.commit = commit()  # without one, a record is still a measurement: labelled by its folder and date
        self.commit_error = None if self.commit else git_head()[1]
        self.name = name or socket.gethostname()  # the machine's label in reports
        self.set_aside: list[str] = []  # unreadable records moved out of the way by this run
        self.records: list[dict] = []  # the records this run wrote
        self.current: str | None = None  # the case being measured
        self.counts: dict[str, int] = {}  # records of each status this run wrote (so far, if interrupted)
        self.written: dict[str, dict] = {}  # each record this run wrote, its latest version, by file name

    @property
    def in_processes(self) -> bool:
        """Whether this run's rounds are each measured in a fresh process."""
        return self.fresh and self.rounds > 1

    def methods(self, area: str, params: dict) -> list[str]:
        """The methods of a case this run times: all of the area's, less those its grid leaves out."""
        return [m for m in cases.METHODS[area] if self.grid is None or cases.method_on_grid(area, params, m, self.grid)]

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

    def unsettled_record(self, record: dict | None) -> bool:
        """Whether a method ran at two levels in the processes so far (``measure.modes_of``), or faulted in pages
        on every call in each of them (``measure.faulting_throughout``: each process may have drawn the slower
        memory state): the methods a round after the planned ones times again, and no others."""
        record = record or {}
        return bool(record.get("modes")) or measure.faulting_throughout(record.get("rounds", []),
                                                                          self.min_run_time / self.rounds)

    def pending(self, area: str, params: dict, round_: int) -> dict[str, dict | None]:
        """The methods of a case that round ``round_`` times, each with its record so far (None: none yet):
        those that lack the round; in a round after the planned ones, only the unsettled ones."""
        return {method: previous for method in self.methods(area, params)
                for have, previous in [self.recorded(area, method, params)]
                if have < round_ and (round_ <= self.rounds or self.unsettled_record(previous))}

    def rounds_left(self, area: str, params: dict) -> int:
        """Method-rounds of the case still to time: 0 when every method already has a record of this commit
        with all of this run's rounds (a resumed run skips the case)."""
        return sum(max(0, self.rounds - self.recorded(area, m, params)[0]) for m in self.methods(area, params))

    def calibrate(self, threads: list[int], again: bool = False, priced: bool = True) -> dict[str, float]:
        """The machine's GEMM peaks for this run (``machine.json``, with the performance model's constants,
        ``constants_cache.this_machine``, and what moves between this machine's runs, ``between_runs``):
        measured at its start, reused on resume; ``again`` (at the end of a run that measured something) measures
        them once more and keeps each key's best of every calibration (``calibrations`` lists them), so that a
        calibration slowed by another process does not stand as the machine's peak. ``priced``: False where the
        performance model prices no case (records that count no operators: the head-parallel ones), and no
        constants are measured."""
        path = os.path.join(self.out, "machine.json")
        saved = self._read(path, records.peaks_problem) if os.path.exists(path) else None
        if saved is not None and saved.get("commit") == self.commit and not again:
            keys = {machine.peak_key("cpu", "float32", t) for t in (None, *threads)}
            current = machine.peak_key("cpu", "float32", None)  # constants at other counts: where cached only
            if set(saved["gemm_peaks"]) >= keys and (current in saved.get("constants", {}) or not priced):
                return saved["gemm_peaks"]
        fresh = machine.calibrate(threads, fresh=again)
        # every calibration of this commit's run stays (a resume that adds the constants loses none)
        earlier = saved.get("calibrations", [saved["gemm_peaks"]]) if saved and (
            again or saved.get("commit") == self.commit) else []
        calibrations = [*earlier, fresh]
        peaks = machine.best_peaks(*calibrations)
        kept = saved.get("constants", {}) if saved and saved.get("commit") == self.commit else {}
        sources = saved.get("constants_source", {}) if kept else {}
        fresh_constants = constants_cache.this_machine(threads, kept, self.quick_constants, self.recalibrate,
                                                          sources) if priced else {}
        facts = machine.metadata()
        write_json_atomic(path, {"machine": facts, "gemm_peaks": peaks, "calibrations": calibrations,
                                 "constants": {**fresh_constants, **kept}, "constants_source": sources,
                                 "between_runs": between_runs.load(facts),
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
        if self.rounds > 1 and case.device == "cpu" and not self.fresh:  # a round's process measures it once
            self._built[key] = case
        return case

    def run_case(self, area: str, params: dict, peaks: dict[str, float], round_: int = 1) -> list[dict]:
        """Build one case and measure each of its methods that round ``round_`` times (``pending``; each round
        times ``min_run_time / rounds`` seconds), writing one record per method. A case with nothing left to
        measure in this round is not built."""
        pending = self.pending(area, params, round_)  # method -> its record after the earlier rounds
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
                                          telemetry_time=self.telemetry_time, previous=previous,
                                          identity={"area": area, "params": params})
                records.append(self.write(area, method, params, "ok", None, started, metrics, previous))
            except Exception as error:
                status, reason = classify_failure(error)
                records.append(self.write(area, method, params, status, reason, started))
                if case.device == "cuda":
                    torch.cuda.empty_cache()
        return records

    def run(self, todo: list[tuple[str, dict]], progress: bool = True, between=None) -> dict[str, int]:
        """Measure every case not yet recorded; returns how many records of each status were written. ``between``:
        called after each planned round's process (the main job times a session of its paired ratios there)."""
        threads = sorted({p["threads"] for a, p in todo if "threads" in p})
        busy = machine.machine_busy()
        if busy:
            print(f"warning: {busy}", file=sys.stderr)
        self.peaks = self.calibrate(threads)
        counts = dict.fromkeys(STATUSES, 0)
        left = [self.rounds_left(a, p) for a, p in todo]  # each record read once here
        remaining = [case for case, n in zip(todo, left, strict=True) if n]
        counts["resumed"] = len(todo) - len(remaining)
        # progress in timed method-rounds (each at least min_run_time / rounds): the time left follows the work
        steps = sum(left)
        methods = sum(len(self.methods(a, p)) for a, p in remaining)
        if progress:  # the header counts what the bar counts
            rounds = (f" in {self.rounds} rounds, " + ("each in a fresh process" if self.fresh else "interleaved")
                      + f" ({steps} method-rounds)") if self.rounds > 1 else ""
            print(f"{len(todo)} cases: {counts['resumed']} already recorded, {len(remaining)} to measure "
                  f"({methods} methods, at least {self.min_run_time:g} s of timing each{rounds}: at least "
                  f"{methods * self.min_run_time:.0f} s of timing in all, building and controls aside)",
                  file=sys.stderr)
        # smoothing=0: the rate over the whole run, not the last methods' (a moving rate swings the time left)
        bar = tqdm(total=steps, desc="measuring", unit="method" if self.rounds == 1 else "method-round",
                   disable=not progress or self.in_processes, file=sys.stderr, smoothing=0)
        self.written = final = {}  # every record written from here on, however the run ends
        self.counts = counts  # what an interrupted run has done so far (filled in below, however it ends)
        try:
            if self.in_processes:
                bar.close()  # each round's process shows its own
                for round_ in range(1, self.rounds + 1) if remaining else ():  # none for a whole folder
                    self.round_in_process(remaining, round_, progress)
                    if between is not None:
                        between()
                for round_ in range(self.rounds + 1, self.rounds + EXTRA_ROUNDS + 1):
                    unsettled = [(a, p) for a, p in remaining if self.pending(a, p, round_)]
                    if unsettled:  # more processes where they disagree or may all have drawn the slower state
                        self.round_in_process(unsettled, round_, progress)
            else:
                with bar:
                    self._rounds(remaining, range(1, self.rounds + 1), bar)
        finally:
            self._built.clear()
            if self.in_processes:  # the records the rounds' processes wrote
                for area, params in remaining:
                    for method in self.methods(area, params):
                        record = self.recorded(area, method, params)[1]
                        if record is not None:
                            final[case_key(area, method, params)] = record
            for record in final.values():
                counts[record["status"]] += 1
            self.records.extend(final.values())
        self.current = None
        if final and int(os.environ.get("RANK", 0)) == 0:  # calibrated again now that the run is over (rank 0
            self.calibrate(threads, again=True)           # writes machine.json): the best of the two stands
        return counts

    def _rounds(self, remaining: list[tuple[str, dict]], rounds: Iterable[int], bar, last: int | None = None) -> None:
        """Measure ``rounds`` of every case in ``remaining``, round by round over the whole grid: each case's
        rounds are spread over the run, so that a slow spell of a shared machine hits one round of many cases
        rather than every round of a few. ``bar`` counts method-rounds up to round ``last`` (default: all)."""
        last = last or self.rounds
        for round_ in rounds:  # the cases that set torch's threads last: setting them changes the process
            for area, params in sorted(remaining, key=lambda case: "threads" in case[1]):
                self.current = case_key(area, "", params).replace("----", " ") + (
                    f" (round {round_} of {max(round_, self.rounds)})" if self.rounds > 1 else "")
                bar.set_postfix_str(self.current[:70])
                for record in self.run_case(area, params, self.peaks, round_):
                    timed = record["status"] == "ok" and "time_median_s" in record
                    bar.update(1 if timed else last - round_ + 1)  # nothing more to time for it

    def settings(self) -> dict:
        """What a round's process needs to measure as this runner does."""
        return {"out": self.out, "min_run_time": self.min_run_time, "telemetry_time": self.telemetry_time,
                "name": self.name, "rounds": self.rounds, "quick_constants": self.quick_constants, "fresh": True,
                "grid": self.grid}

    def round_in_process(self, remaining: list[tuple[str, dict]], round_: int, progress: bool) -> None:
        """Round ``round_`` of every case in ``remaining``, measured in a fresh process (spawned: a new
        interpreter, torch imported anew) that writes the records as this one would; waits for it. Ctrl-C
        stops both (the process's records so far are whole); a process that dies is said on stderr, and its
        cases keep the rounds they have (a resumed run measures the rest)."""
        process = multiprocessing.get_context("spawn").Process(
            target=_measure_round, args=(self.settings(), self.peaks, remaining, round_, progress, os.getpid()),
            daemon=True)
        process.start()
        try:
            process.join()
        except KeyboardInterrupt:
            process.join(timeout=30)  # it got the Ctrl-C too, and stops after its current record
            if process.is_alive():
                process.terminate()
            raise
        if process.exitcode == EXIT_INTERRUPTED:
            raise KeyboardInterrupt
        if process.exitcode == EXIT_DISK_FULL:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if process.exitcode != 0:
            print(f"warning: the process of round {round_} of {self.rounds} ended with exit code {process.exitcode}; "
                  "its cases keep the rounds they have (run the same command again to measure the rest)",
                  file=sys.stderr)

    def summary(self, counts: dict[str, int]) -> str:
        """The run on one screen: what was measured, skipped (why), out of memory, failed (why), noisy,
        set aside, and where the results are."""
        return summary(self.out, self.records, counts, self.set_aside)


#: the exit codes of a round's process stopped by Ctrl-C, and by a full disk
EXIT_INTERRUPTED, EXIT_DISK_FULL = 130, 28
#: rounds in fresh processes after the planned ones, each for the cases still unsettled (run's rounds > 1)
EXTRA_ROUNDS = 2


def _measure_round(settings: dict, peaks: dict[str, float], remaining: list[tuple[str, dict]], round_: int,
                   progress: bool, parent: int | None = None) -> None:
    """A round's process (``Runner.round_in_process``): round ``round_`` of ``remaining``, with the peaks the
    run calibrated, each record written as its case ends; it ends with the run's process ``parent``."""
    if parent is not None:
        child.end_with(parent, EXIT_INTERRUPTED)
    runner = Runner(**settings)
    runner.peaks = peaks
    try:
        left = sum(len(runner.pending(a, p, round_)) for a, p in remaining)
        bar = tqdm(total=left, desc=f"round {round_} of {max(round_, runner.rounds)}", unit="method",
                   disable=not progress, file=sys.stderr, smoothing=0)
        with bar:
            runner._rounds(remaining, [round_], bar, last=round_)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            sys.exit(EXIT_DISK_FULL)
        raise
