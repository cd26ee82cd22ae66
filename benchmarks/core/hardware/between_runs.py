"""What moves between runs on one machine, beyond a run's own processes: kept per machine for its later runs.

``attention-bench reproduce`` measures it over a batch of runs of one machine (``reports.reproduce.between_runs``:
a variance of log figures per kind of figure, an area's case times or a device's paired ratios) and keeps it
here, in the constants' cache folder (``constants_cache.folder``), under the runs' machine: its hostname, CPU
and GPU. Each batch joins the batches kept before it (``pooled``): three runs give each figure two degrees of
freedom, so one batch's variance moves by its own size from batch to batch, and the runs after it would widen
their intervals by that draw. A run on that machine copies it into its ``machine.json`` (``runner.calibrate``),
so that the run folder says, on any machine that reads it, what its intervals add
(``benchmarks.core.timing.rerun.widened``). A batch older than MAX_AGE_DAYS no longer stands for the machine.
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


def path(metadata: dict, name: str = "between-runs") -> str:
    """The file ``name`` keeps for the machine of ``metadata``, in the constants' cache folder."""
    digest = hashlib.sha256(json.dumps(key(metadata), sort_keys=True).encode()).hexdigest()[:20]
    return os.path.join(constants_cache.folder(), f"{name}-{digest}.json")


def pooled(batches: list[dict]) -> dict:
    """The variance between runs over several batches of one machine's runs (each ``reports.reproduce.between_runs``
    with its "excess" and "dof"): per group, the batches' excess weighted by their degrees of freedom, never below
    0; {"variance", "figures", "runs": every batch's, "batches": how many}."""
    excess: dict[str, float] = {}
    dof: dict[str, float] = {}
    figures: dict[str, int] = {}
    for b in batches:
        for group, e in b["excess"].items():
            excess[group] = excess.get(group, 0.0) + e * b["dof"][group]
            dof[group] = dof.get(group, 0) + b["dof"][group]
            figures[group] = max(figures.get(group, 0), b["figures"][group])
    return {"variance": {g: max(0.0, excess[g] / dof[g]) for g in sorted(excess) if dof[g]},
            "figures": dict(sorted(figures.items())), "runs": [r for b in batches for r in b["runs"]],
            "batches": len(batches)}


def identity(folder: str) -> str | None:
    """What names a run whatever its folder is called: a digest of its ``machine.json`` (its calibrations, with
    the moments they were measured), which a copy of the folder shares; None where it has none."""
    try:
        with open(os.path.join(folder, "machine.json"), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:20]
    except OSError:
        return None


def save(metadata: dict, measured: dict) -> str:
    """Keep ``measured`` (``reports.reproduce.between_runs``: a batch of runs) for the machine of ``metadata``,
    pooled with the batches kept for it within MAX_AGE_DAYS but those sharing a run with it: a batch measured
    again replaces itself, and so does one of copies of its run folders (``identity``), which would otherwise
    count the same runs twice; the file's path."""
    file = path(metadata)
    now = dt.datetime.now(dt.timezone.utc)
    runs = [os.path.realpath(r) for r in measured["runs"]]  # a folder named by another path or link is the same run
    ids = [i for i in map(identity, runs) if i]
    before = [b for b in (load(metadata) or {}).get("kept", [])
              if not {os.path.realpath(r) for r in b["runs"]} & set(runs)
              and not set(b.get("identities", ())) & set(ids)
              and now - dt.datetime.fromisoformat(b["measured_at"]) <= dt.timedelta(days=MAX_AGE_DAYS)]
    batch = {k: measured[k] for k in ("excess", "dof", "figures")} | {"runs": runs, "identities": ids,
                                                                      "measured_at": now.isoformat()}
    kept = [*before, batch]
    os.makedirs(os.path.dirname(file), exist_ok=True)
    records.write_json_atomic(file, {"key": key(metadata), **pooled(kept), "kept": kept,
                                     "measured_at": now.isoformat()})
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
