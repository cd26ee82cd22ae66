"""What moves between runs on one machine, beyond a run's own processes: kept per machine for its later runs.

``attention-bench reproduce`` measures it over several runs of one machine (``reports.reproduce.between_runs``:
a variance of log figures per kind of figure, an area's case times or a device's paired ratios) and keeps it
here, in the constants' cache folder (``constants_cache.folder``), under the runs' machine: its hostname, CPU
and GPU. A run on that machine copies it into its ``machine.json`` (``runner.calibrate``), so that the run
folder says, on any machine that reads it, what its intervals add (``benchmarks.core.timing.rerun.widened``).
A measurement older than MAX_AGE_DAYS no longer stands for the machine.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os

from .. import records
from . import constants_cache

#: days a measurement of the variance between runs stands for the machine
MAX_AGE_DAYS = 30
#: the machine facts that name a machine here
FACTS = ("hostname", "cpu_model", "cpu_count", "gpu_name")


def key(metadata: dict) -> dict:
    """The facts of a machine (``machine.metadata()`` or a run's ``machine.json["machine"]``) it is kept under."""
    return {k: metadata.get(k) for k in FACTS}


def path(metadata: dict) -> str:
    digest = hashlib.sha256(json.dumps(key(metadata), sort_keys=True).encode()).hexdigest()[:20]
    return os.path.join(constants_cache.folder(), f"between-runs-{digest}.json")


def save(metadata: dict, measured: dict) -> str:
    """Keep ``measured`` (``reports.reproduce.between_runs``) for the machine of ``metadata``; the file's path."""
    file = path(metadata)
    os.makedirs(os.path.dirname(file), exist_ok=True)
    records.write_json_atomic(file, {"key": key(metadata), **measured,
                                     "measured_at": dt.datetime.now(dt.timezone.utc).isoformat()})
    return file


def load(metadata: dict) -> dict | None:
    """What was measured between runs of the machine of ``metadata`` within MAX_AGE_DAYS, or None."""
    file = path(metadata)
    if not os.path.exists(file):
        return None
    try:
        saved = records.read_json(file)
        when = dt.datetime.fromisoformat(saved["measured_at"])
        fresh = dt.datetime.now(dt.timezone.utc) - when <= dt.timedelta(days=MAX_AGE_DAYS)
        right = saved.get("key") == key(metadata) and isinstance(saved.get("variance"), dict)
        return saved if right and fresh else None
    except (records.UnreadableRecord, KeyError, ValueError, TypeError):
        return None
