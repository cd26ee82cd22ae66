"""What a case's call executes (its operators and their bytes, its dispatches and its Python lines:
``benchmarks.core.opgraph``), counted once per version of the code that builds and runs it.

The count is a function of that code, torch's version and the case alone, and costs one more call, under a
dispatch mode and a line tracer (``sys.settrace``): about 35 s of the default grid's run on a 2-core CPU. So a
run keeps it in the constants' cache folder (``constants_cache.folder``) under the case, the method, torch's
version, the cache size its cold bytes are counted against and a digest of every Python file of
``transformer/`` and ``benchmarks/`` but those that only time, profile or compare cases already built
(``NOT_THE_CALL``), and a later run of the same code reads it instead of counting again.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

import torch

from .. import opgraph, records
from ..hardware import constants_cache

#: the packages whose code decides what a case's call executes
PACKAGES = ("transformer", "benchmarks")


#: the files of PACKAGES that time or compare cases another module built, keep what was measured, or read the machine
#: (its peaks, its CPU counters, its facts), and never decide what a case's call executes: a change there keeps the
#: counts (paths relative to ROOT; a folder ends in /)
NOT_THE_CALL = ("benchmarks/pairs.py", "benchmarks/gate.py", "benchmarks/history.py", "benchmarks/core/pairing/",
                "benchmarks/core/hardware/between_runs.py", "benchmarks/core/hardware/machine.py",
                "benchmarks/core/profiling/", "benchmarks/core/running/",
                "benchmarks/core/timing/measure.py", "benchmarks/core/timing/rerun.py",
                "benchmarks/core/timing/telemetry.py", "benchmarks/core/records.py")


#: the folder that holds PACKAGES
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@functools.lru_cache(maxsize=4)
def code_digest(root: str = ROOT) -> str:
    """A digest of every Python file of PACKAGES under ``root`` (paths and contents) but NOT_THE_CALL's, read once
    per process."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted(glob.glob(os.path.join(root, package, "**", "*.py"), recursive=True)):
            name = os.path.relpath(path, root).replace(os.sep, "/")
            if any(name == n or n.endswith("/") and name.startswith(n) for n in NOT_THE_CALL):
                continue
            digest.update(name.encode())
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()[:20]


def path(key: dict) -> str:
    name = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return os.path.join(constants_cache.folder(), "graphs", f"{name}.json")


def counted(case: dict | None, fn: Callable[[], Any], cache_bytes: int) -> tuple[list[dict], dict]:
    """(the operators' summary, the dispatches with "line": the Python lines) of ``fn``, the call of ``case``
    ({"area", "method", "params"}); from the cache when this code counted it before, else counted and kept.
    Without ``case`` (a call that names no case) always counted."""
    def count() -> dict:
        graph = opgraph.record(fn, lines=True)
        return {"ops": graph.summary(cache_bytes), "dispatches": dict(graph.dispatches)}

    saved = _kept({"case": case, "code": code_digest(), "torch": torch.__version__, "cache_bytes": cache_bytes},
                  case is not None, count, ("ops", "dispatches"))
    return saved["ops"], saved["dispatches"]


def depth(case: dict | None, fn: Callable[[], Any]) -> dict:
    """The executed graph's sequential depth, launches and counted matmul FLOPs of ``fn``, the call of a depth
    case (``case``, as ``counted`` has it), kept as ``counted`` keeps its count."""
    def count() -> dict:
        graph = opgraph.record(fn)
        return {"sequential_depth": graph.depth, "op_launches": graph.launches,
                "counted_matmul_flops": graph.matmul_flops}

    key = {"case": case, "code": code_digest(), "torch": torch.__version__, "what": "depth"}
    return _kept(key, case is not None, count, ("sequential_depth", "op_launches", "counted_matmul_flops"))


def _kept(key: dict, keep: bool, count: Callable[[], dict], fields: tuple[str, ...]) -> dict:
    """The ``fields`` that ``count`` returns for ``key``: read from the cache where they were kept before (and
    ``keep``; a file without them is counted over), else counted and, where ``keep``, kept."""
    file = path(key) if keep else None
    if file and os.path.exists(file):
        try:
            saved = records.read_json(file)
            if saved.get("key") == json.loads(json.dumps(key, default=str)):
                return {f: saved[f] for f in fields}
        except (records.UnreadableRecord, KeyError, TypeError):
            pass  # counted over
    saved = count()
    if file:
        try:
            os.makedirs(os.path.dirname(file), exist_ok=True)
            records.write_json_atomic(file, {"key": key, **saved})
        except OSError:  # a cache that cannot be written costs the next run a count, nothing more
            pass
    return saved
