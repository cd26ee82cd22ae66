"""Run folders' records: one JSON file per case and method, written atomically, read with a clear error.

A record is written whole or not at all (``write_json_atomic``); one that does not parse is an
``UnreadableRecord`` naming its file, one that parses but cannot be right fails ``problem`` (the schema:
required fields and their types, a known status, finite positive times in order, FLOP/s and tokens/s equal
to their counts over the time), and ``set_aside`` moves either out of the way without overwriting an
earlier one. ``case_key`` names a record; ``commit`` says which code measured it; ``classify_failure``
turns a case's exception into the status and reason it is recorded with.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import numbers
import os
import subprocess
import tempfile
import time
import traceback

import torch

from ..area import Skip

#: what a case's record can say of it
STATUSES = ("ok", "skipped", "oom", "failed")


def case_key(area: str, method: str, params: dict) -> str:
    """A file-name-safe, unique name for one record."""
    return "--".join([area, method, *(f"{k}={v}" for k, v in params.items())])


#: the folders whose code decides what a record measures: uncommitted edits there are part of its identity
MEASURED_CODE = ("transformer", "benchmarks")
#: what marks a commit whose working tree had such edits: ``<sha>+dirty.<hash of the edits>``
DIRTY = "+dirty."


def _git(args: list[str], root: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, cwd=root)


def tree_change(root: str) -> str | None:
    """A short hash of the uncommitted edits to MEASURED_CODE under the repository at ``root`` (tracked
    files' diff against HEAD and the contents of untracked, not ignored files), or None when there are none."""
    top = _git(["rev-parse", "--show-toplevel"], root).stdout.decode().strip() or root
    diff = _git(["diff", "HEAD", "--binary", "--", *MEASURED_CODE], top).stdout
    untracked = _git(["ls-files", "-z", "--others", "--exclude-standard", "--", *MEASURED_CODE], top).stdout
    if not diff and not untracked:
        return None
    digest = hashlib.sha256(diff)
    for name in sorted(filter(None, untracked.split(b"\0"))):
        digest.update(b"\0" + name + b"\0")
        try:
            with open(os.path.join(top, os.fsdecode(name)), "rb") as f:
                digest.update(f.read())
        except OSError:
            pass
    return digest.hexdigest()[:12]


def git_head(root: str | None = None) -> tuple[str | None, str | None]:
    """(the commit of the code being measured, None), or (None, why git could not say): a copy without
    ``.git``, a checkout git refuses to read ("dubious ownership"), no git at all. A working tree with
    uncommitted edits to MEASURED_CODE gives ``<sha>+dirty.<hash of the edits>``: its records are never
    taken for the clean commit's, nor for another edit's."""
    root = root or os.path.dirname(os.path.abspath(__file__))
    try:
        done = _git(["rev-parse", "HEAD"], root)
    except OSError as error:
        return None, f"git could not run: {error}"
    if done.returncode:
        lines = [line for line in done.stderr.decode(errors="replace").strip().splitlines() if line.strip()]
        return None, "git rev-parse HEAD failed: " + (lines[0] if lines else f"exit code {done.returncode}")
    change = tree_change(root)
    return done.stdout.decode().strip() + (DIRTY + change if change else ""), None


def commit(root: str | None = None) -> str | None:
    return git_head(root)[0]


def short(commit: str | None) -> str:
    """A commit as the pages name it: its first 8 hex digits, and ``+dirty.<hash>`` when the tree had edits."""
    if not commit:
        return str(commit)
    sha, _, change = str(commit).partition(DIRTY)
    return sha[:8] + (DIRTY + change[:8] if change else "")


@contextlib.contextmanager
def _atomic(path: str):
    """A file open for writing that replaces ``path`` only once it is whole (a reader sees the old file or
    the whole new one, never half); on an error the old file stays and the temporary one goes."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_json_atomic(path: str, data) -> None:
    """Write JSON so that a reader sees either the old file or the whole new one, never half."""
    with _atomic(path) as f:
        json.dump(data, f, indent=1, sort_keys=True, default=str)


def write_text_atomic(path: str, text: str) -> None:
    """Write text so that a reader sees either the old file or the whole new one, never half."""
    with _atomic(path) as f:
        f.write(text)


def check_replaceable(path: str, what: str, is_own, own: str) -> None:
    """ValueError naming ``path`` unless a command may write its output there: nothing is there yet, or
    ``is_own(path)`` recognises what is there as that command's own output (``own``: what that is, said in
    the error). A command replaces only what it made, and refuses anything else before it measures."""
    if not os.path.lexists(path):
        return
    if os.path.isdir(path):
        raise ValueError(f"{what} {path!r} is a folder; give a file name")
    try:
        mine = is_own(path)
    except (OSError, ValueError, UnicodeDecodeError):
        mine = False
    if not mine:
        raise ValueError(f"{what} {path!r} already holds something that is not {own}; only {own} is replaced: "
                         f"move it or give another {what}")


def is_record_of(kind: str):
    """``is_own`` for ``check_replaceable``: the file is a JSON record of ``kind`` (its ``kind`` field)."""
    return lambda path: read_json(path).get("kind") == kind


def check_record_path(path: str, kind: str, what: str = "--record") -> None:
    """``check_replaceable`` for a script's JSON record of ``kind``."""
    check_replaceable(path, what, is_record_of(kind), f"a record of kind {kind!r}")


#: environment variables that change how fast the same code runs (thread pools' wait policy and sizes, the
#: allocator, BLAS kernels): part of a measurement's regime
REGIME_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "MALLOC_", "PYTORCH_", "LD_PRELOAD",
                   "ATTENTION_BENCH_SET_THREADS")


def regime() -> dict:
    """The regime a time is measured in, beyond the code and the case: torch's thread count and the runtime
    settings in the environment (an empty ``env``: every runtime default, as users get them)."""
    return {"threads": torch.get_num_threads(),
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(REGIME_PREFIXES)}}


class UnreadableRecord(ValueError):
    """A result file that is not the JSON object it should be (cut short, overwritten, empty)."""


def read_json(path: str) -> dict:
    """A record written by ``write_json_atomic``; UnreadableRecord naming the file if it is not one."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (ValueError, UnicodeDecodeError) as error:
        raise UnreadableRecord(f"{path}: not a JSON record ({type(error).__name__}: {error})") from None
    if not isinstance(data, dict):
        raise UnreadableRecord(f"{path}: not a JSON record (a {type(data).__name__}, not an object)")
    return data


#: fields a record holds as numbers (None where not measured): anything else there is a damaged record
NUMBERS = ("time_median_s", "time_q25_s", "time_q75_s", "time_iqr_s", "time_best_round_s", "samples", "blocks",
           "calls_per_block", "matmul_flops", "other_flops", "tokens", "achieved_flops_per_s", "tokens_per_s",
           "gemm_peak_flops_per_s", "fraction_of_peak", "control_flops_per_s", "others_cpu_share", "compute_s",
           "comm_s", "comm_share", "comm_bytes", "comm_bytes_measured", "sequential_depth", "op_launches",
           "counted_matmul_flops", "gpu_peak_memory_bytes", "energy_per_token_j", "rounds_planned", "duration_s")
#: (rate, count): a rate a record stores must equal its count over the median time (to this relative tolerance)
RATES = (("achieved_flops_per_s", "matmul_flops"), ("tokens_per_s", "tokens"))
RATE_TOLERANCE = 1e-6


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def positive(value) -> bool:
    """A finite number above 0 (not a bool, a string or NaN)."""
    return _number(value) and value > 0


def problem(record: dict) -> str | None:
    """Why a case record cannot be right, or None: the one place the schema of ``cases/*.json`` is checked,
    by the runner before it resumes past a record and by the report before it counts one."""
    for field, kind in (("area", str), ("method", str), ("params", dict), ("status", str)):
        if not isinstance(record.get(field), kind):
            return f"{field} is {record.get(field)!r}, not a {kind.__name__}"
    if record["status"] not in STATUSES:
        return f"status {record['status']!r} is not one of {', '.join(STATUSES)}"
    if record.get("reason") is not None and not isinstance(record["reason"], str):
        return f"reason is {record['reason']!r}, not text"
    for field in NUMBERS:
        if record.get(field) is not None and not _number(record[field]):
            return f"{field} is {record[field]!r}, not a finite number"
    if record["status"] != "ok":
        return None
    if "ops" in record and _ops_problem(record):
        return _ops_problem(record)
    if "time_median_s" in record:
        return _time_problem(record)
    if record.get("sequential_depth") is None:
        return "an ok record with neither a time (time_median_s) nor a graph (sequential_depth)"
    return None


def _ops_problem(record: dict) -> str | None:
    """What is wrong with the operators a record says its call executed (``opgraph.OpGraph.summary``), or None."""
    ops, dispatches = record["ops"], record.get("dispatches", {})
    fields = {"name": str, "flops": int, "bytes": int, "shape": list, "written": int, "count": int}
    if not isinstance(ops, list) or not all(isinstance(op, dict) and set(op) - {"cold"} == set(fields) for op in ops):
        return f"ops is not a list of operators, each with exactly {', '.join(fields)} (and perhaps cold)"
    for op in ops:
        op_fields = {**fields, "cold": int} if "cold" in op else fields
        if not all(isinstance(op[f], kind) and not isinstance(op[f], bool) for f, kind in op_fields.items()) or min(
                op["flops"], op["bytes"], op["written"], op["count"] - 1, op.get("cold", 0)) < 0:
            return f"ops holds {op!r}: counts must be whole numbers, none negative"
    if not isinstance(dispatches, dict) or not all(isinstance(n, int) and n >= 0 for n in dispatches.values()):
        return f"dispatches is {dispatches!r}, not counts of views, scopes and module calls"
    return None


def _time_problem(record: dict) -> str | None:
    q25, median, q75 = (record.get(f"time_{k}_s") for k in ("q25", "median", "q75"))
    if median is None or median <= 0:
        return f"time_median_s is {median!r}, not a positive time"
    if q25 is not None and q75 is not None and not 0 <= q25 <= median <= q75:
        return f"the time's quartiles are out of order (q25 {q25!r}, median {median!r}, q75 {q75!r})"
    rounds = record.get("rounds", [])
    if not isinstance(rounds, list) or not all(isinstance(r, dict) and _number(r.get("median_s"))
                                               and r["median_s"] > 0 for r in rounds):
        return "rounds is not a list of rounds with positive finite times (median_s)"
    for rate, count in RATES:
        if record.get(rate) is not None:
            if record.get(count) is None:
                return f"{rate} is stored without {count}"
            expected = record[count] / median
            if abs(record[rate] - expected) > RATE_TOLERANCE * max(abs(expected), 1e-300):
                return f"{rate} {record[rate]:.6g} is not {count} / time_median_s = {expected:.6g}"
    peak, fraction = record.get("gemm_peak_flops_per_s"), record.get("fraction_of_peak")
    achieved = record.get("achieved_flops_per_s")
    if fraction is not None and (not peak or achieved is None
                                 or abs(fraction - achieved / peak) > RATE_TOLERANCE * abs(fraction)):
        return f"fraction_of_peak {fraction:.6g} is not achieved_flops_per_s / gemm_peak_flops_per_s"
    for share in ("comm_share", "others_cpu_share"):
        if record.get(share) is not None and not 0 <= record[share] <= 1:
            return f"{share} is {record[share]!r}, not a share between 0 and 1"
    return None


def profile_problem(record: dict) -> str | None:
    """Why a profile record cannot be right (``problem`` for ``profiles/<case>/profile.json``), or None:
    the case's fields, a positive unprofiled time, and components with finite non-negative times and
    shares of at most 1."""
    for field, kind in (("area", str), ("method", str), ("params", dict), ("components", list),
                        ("memory_by_component", dict)):
        if not isinstance(record.get(field), kind):
            return f"{field} is {record.get(field)!r}, not a {kind.__name__}"
    if not positive(record.get("unprofiled_s")):
        return f"unprofiled_s is {record.get('unprofiled_s')!r}, not a positive time"
    for c in record["components"]:
        if not isinstance(c, dict) or not isinstance(c.get("component"), str):
            return f"a component {c!r} has no name"
        share = c.get("share", 0)  # NaN where no component took any time
        if not (positive(c.get("time_s")) or c.get("time_s") == 0) or not (
                _number(share) and 0 <= share <= 1 or isinstance(share, float) and math.isnan(share)):
            return f"component {c['component']!r}: time {c.get('time_s')!r} s, share {c.get('share')!r}"
    return None


def case_problem(path: str, record: dict) -> str | None:
    """``problem``, and a record filed under another case's name: its area, method and params must give its
    file name (``case_key``), or a resumed run would skip the case it names and report another."""
    why = problem(record)
    if why:
        return why
    area, method, *params = os.path.basename(path).removesuffix(".json").split("--") + [""]
    named = [p for p in params if p]
    if (area, method, sorted(named)) != (record["area"], record["method"],
                                         sorted(f"{k}={v}" for k, v in record["params"].items())):
        expected = case_key(record["area"], record["method"], record["params"]) + ".json"
        return f"its area, method and params name it {expected}, not {os.path.basename(path)}"
    return None


def pairs_problem(record: dict) -> str | None:
    """Why a paired-ratios record (``benchmarks.pairs``, kind ``pairs``) cannot be right, or None: each
    measured pair has positive times and a positive finite ratio inside its interval (and a c2 pair's fraction of
    the GEMM's rate inside its own)."""
    if record.get("kind") != "pairs" or not isinstance(record.get("pairs"), list):
        return f"kind {record.get('kind')!r} with no list of pairs, not a pairs record"
    for p in record["pairs"]:
        if not isinstance(p, dict) or not isinstance(p.get("kind"), str) or not isinstance(p.get("params"), dict):
            return f"a pair {str(p)[:80]!r} has no kind or parameters"
        if p.get("status") == "ok" and not (
                all(positive(p.get(f)) for f in ("a_s", "b_s", "ratio", "low", "high"))
                and p["low"] <= p["ratio"] <= p["high"]):
            return (f"pair {p['kind']} {p['params']}: ratio {p.get('ratio')!r} outside its interval "
                    f"{p.get('low')!r}-{p.get('high')!r}, or a time not above 0")
        if p.get("status") == "ok" and "fraction" in p and not (
                all(positive(p.get(f)) for f in ("fraction", "fraction_low", "fraction_high"))
                and p["fraction_low"] <= p["fraction"] <= p["fraction_high"]):
            return (f"pair {p['kind']} {p['params']}: fraction {p.get('fraction')!r} outside its interval "
                    f"{p.get('fraction_low')!r}-{p.get('fraction_high')!r}, or not above 0")
    return None


def peaks_problem(saved: dict) -> str | None:
    """Why a run folder's ``machine.json`` cannot be right, or None: it must hold the machine's facts and a
    positive finite GEMM peak per device/dtype/threads key."""
    if not isinstance(saved.get("machine"), dict) or not isinstance(saved.get("gemm_peaks"), dict):
        return "not a runner machine record (no 'machine' or 'gemm_peaks')"
    for key, peak in saved["gemm_peaks"].items():
        if len(str(key).split("/")) != 3 or not _number(peak) or peak <= 0:
            return f"GEMM peak {key!r}: {peak!r} is not a positive finite FLOP/s under a device/dtype/threads key"
    return None


def set_aside(path: str, folder: str) -> str:
    """Move an unreadable record into ``folder`` (created if missing), keeping it for inspection under a
    name that never overwrites an earlier one; returns its new path."""
    os.makedirs(folder, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    dest = os.path.join(folder, f"{os.path.basename(path)}.{stamp}")
    n = 1
    while os.path.exists(dest):
        dest, n = os.path.join(folder, f"{os.path.basename(path)}.{stamp}.{n}"), n + 1
    os.replace(path, dest)
    return dest


def classify_failure(error: BaseException) -> tuple[str, str]:
    """(status, reason) of a case that raised: ``skipped`` (it cannot run here), ``oom`` or ``failed``."""
    if isinstance(error, Skip):
        return "skipped", str(error)
    if is_oom(error):
        return "oom", str(error).splitlines()[0]
    return "failed", "".join(traceback.format_exception_only(type(error), error)).strip()


def is_oom(error: BaseException) -> bool:
    """Out of memory on any device: torch's OutOfMemoryError (CUDA), or the CPU allocator's RuntimeError."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and ("out of memory" in str(error) or "can't allocate memory" in str(error)))
