"""The performance model's constants (``constants.measure``), cached per machine, software and thread count.

Measuring them costs half a minute a thread count on a 2-core CPU; they describe the machine, not a commit, so a
run reuses the ones measured within MAX_AGE_DAYS on the same machine (CPU model and count, GPU), the same torch
and math libraries, the same runtime settings, the same thread count and the same measuring code (this
package's ``constants.py``); anything else, or ``--recalibrate``, measures them again. The cache is a folder
of JSON files: ``$ATTENTION_BENCH_CACHE``, else ``$XDG_CACHE_HOME/attention-bench``, else
``~/.cache/attention-bench``. A file that cannot be read is measured over.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable

import torch

from ...area import using_threads
from .. import records
from . import constants, machine

#: days a cached measurement stands for the machine
MAX_AGE_DAYS = 7


def folder() -> str:
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("ATTENTION_BENCH_CACHE") or os.path.join(home, "attention-bench")


def fingerprint(device: str, dtype: str, quick: bool) -> dict:
    """What the constants depend on, at the current thread count."""
    facts = machine.metadata()
    with open(constants.__file__, "rb") as f:
        code = hashlib.sha256(f.read()).hexdigest()[:16]
    return {"device": device, "dtype": dtype, "quick": quick, "threads": torch.get_num_threads(),
            "regime": records.regime()["env"], "code": code,
            **{k: facts.get(k) for k in ("hostname", "cpu_model", "cpu_count", "gpu_name", "torch", "mkl", "onednn")}}


def path(key: dict) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return os.path.join(folder(), f"constants-{key['device']}-{key['dtype']}-t{key['threads']}-{digest}.json")


def cached(device: str, dtype: str, quick: bool) -> tuple[dict, str] | None:
    """The constants of ``device`` at the current thread count from the cache, and "cached, measured <when>";
    None where none measured within MAX_AGE_DAYS with this fingerprint is there (or the file cannot be read)."""
    return _read(fingerprint(device, dtype, quick))


def _read(key: dict) -> tuple[dict, str] | None:
    """``cached`` for the fingerprint ``key``."""
    file = path(key)
    if os.path.exists(file):
        try:
            saved = records.read_json(file)
            when = dt.datetime.fromisoformat(saved["measured_at"])
            if saved.get("key") == key and dt.datetime.now(dt.timezone.utc) - when <= dt.timedelta(days=MAX_AGE_DAYS):
                return saved["constants"], f"cached, measured {saved['measured_at'][:16]}"
        except (records.UnreadableRecord, KeyError, ValueError, TypeError):
            pass  # measured over
    return None


def get(device: str, dtype: str, quick: bool, again: bool = False,
        measure: Callable[..., dict] | None = None) -> tuple[dict, str]:
    """The constants of ``device`` at the current thread count and where they come from ("measured now", or
    "cached, measured <when>"): from the cache when a fresh one is there and ``again`` is False (``cached``), else
    measured (``measure``, default ``constants.measure``; once more where ``constants.disturbed`` says the kernels
    ran slowed, the better of the two kept, with "measured_twice": why) and cached."""
    key = fingerprint(device, dtype, quick)
    file = path(key)
    if not again and (saved := _read(key)):
        return saved
    what = f"the performance model's constants ({device}, {dtype}" + (
        f", {key['threads']} thread{'s' if key['threads'] > 1 else ''})" if device == "cpu" else ")")
    print(f"measuring {what}, kept in {folder()} for {MAX_AGE_DAYS} days", file=sys.stderr, flush=True)
    started = time.perf_counter()
    value = (measure or constants.measure)(device, dtype, quick)
    if why := constants.disturbed(value):  # measured once more: the one whose kernels ran nearer the control stands
        print(f"note: {what}: {why}; measured again", file=sys.stderr, flush=True)
        again_value = (measure or constants.measure)(device, dtype, quick)
        value = {**max((value, again_value), key=constants.kernels_share), "measured_twice": why}
    print(f"measured {what} in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    try:
        os.makedirs(folder(), exist_ok=True)
        records.write_json_atomic(file, {"key": key, "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(),
                                         "constants": value})
    except OSError:  # a cache that cannot be written costs the next run a measurement, nothing more
        pass
    return value, "measured now"


def this_machine(threads: list[int], skip: Iterable[str] = (), quick: bool = False, again: bool = False,
                      sources: dict | None = None) -> dict[str, dict]:
    """The performance model's constants (``constants.measure``; ``quick``: its coarse grid) of every device
    and dtype this machine has, by ``machine.peak_key``: the CPU at its current thread count (the one the run's
    cases use, the strong-scaling ones aside) from this machine's cache unless ``again``, else measured; at each
    other count of ``threads`` (the strong-scaling cases') only where this machine's cache holds them, or
    measured with ``again``: each count costs as long as the current one, longer at fewer threads, and a run
    spends that on the count its answers are priced at. The keys in ``skip`` are left out. ``sources`` (a dict) is
    told where each key's constants came from."""
    out, sources = {}, {} if sources is None else sources
    current = torch.get_num_threads()
    for t in sorted({current, *threads}):
        key = machine.peak_key("cpu", "float32", t)
        if key not in skip:
            with using_threads(t):
                found = get("cpu", "float32", quick, again) if t == current or again else cached(
                    "cpu", "float32", quick)
            if found:
                out[key], sources[key] = found
    for dtype in machine.GEMM_DTYPES["cuda"] if torch.cuda.is_available() else ():
        key = machine.peak_key("cuda", dtype, None)
        if key not in skip:
            out[key], sources[key] = get("cuda", dtype, quick, again)
    return out
