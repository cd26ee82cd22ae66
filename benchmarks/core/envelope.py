"""One envelope for every saved record beside a run folder's case records: the gate's comparison, the pairs'
ratios, a history's commits, the scripts' records and the reports' saved tables. Each is one JSON object:

    kind       what it is: the renderer (``reports.measured.RENDER``) and the replace rule go by it
    generated  when it was written (UTC, ISO 8601)
    commit     the code whose speed it describes (a gate: its head; a history record: the commit timed)
    machine    what a reader compares machines by: CPU model and count, torch, GPU (``MACHINE_FACTS``)
    regime     the threads and runtime settings its times were measured in (``records.regime``: the
               worker's where a worker timed them), or None where one record spans several

then the kind's own fields. ``save`` writes it whole or not at all, and only over a record of the same kind.
"""

from __future__ import annotations

import datetime as dt

from .hardware import machine
from .records import check_record_path, write_json_atomic

FIELDS = ("kind", "generated", "commit", "machine", "regime")
MACHINE_FACTS = ("cpu_model", "cpu_count", "torch", "gpu_name")


def envelope(kind: str, commit: str | None, regime: dict | None) -> dict:
    """The envelope's fields for a record of ``kind`` written now, on this machine."""
    facts = machine.metadata()
    return {"kind": kind, "generated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "machine": {k: facts.get(k) for k in MACHINE_FACTS}, "regime": regime}


def save(path: str, kind: str, commit: str | None, *, regime: dict | None, what: str = "--record",
         **fields) -> dict:
    """Write the record of ``kind`` at ``path`` (the envelope, then ``fields``) and return it; ValueError naming
    the file if it holds something else than a record of the same kind (``records.check_record_path``)."""
    check_record_path(path, kind, what)
    clash = set(fields) & set(FIELDS)
    if clash:
        raise ValueError(f"fields {sorted(clash)} are the envelope's; a record's own fields are named otherwise")
    record = {**envelope(kind, commit, regime), **fields}
    write_json_atomic(path, record)
    return record


def when(record: dict) -> str:
    """When a saved record was written: its ``generated`` (a record saved before the envelope: its ``date``)."""
    return record.get("generated") or record.get("date") or ""


def problem(record: dict) -> str | None:
    """Why ``record`` is not in the envelope, or None."""
    missing = [f for f in FIELDS if f not in record]
    if missing:
        return f"no {', '.join(missing)}"
    if not isinstance(record["kind"], str) or not isinstance(record["machine"], dict):
        return "kind must be a string and machine an object"
    if not isinstance(record["regime"], dict | None):
        return "regime must be an object or null"
    return None
