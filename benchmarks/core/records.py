"""Run folders' records: one JSON file per case and method, written atomically, read with a clear error.

A record is written whole or not at all (``write_json_atomic``); one that does not parse is an
``UnreadableRecord`` naming its file, and ``set_aside`` moves it out of the way without overwriting an
earlier one. ``case_key`` names a record; ``commit`` says which code measured it; ``classify_failure``
turns a case's exception into the status and reason it is recorded with.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import traceback

import torch

from .. import cases

#: what a case's record can say of it
STATUSES = ("ok", "skipped", "oom", "failed")


def case_key(area: str, method: str, params: dict) -> str:
    """A file-name-safe, unique name for one record."""
    return "--".join([area, method, *(f"{k}={v}" for k, v in params.items())])


def git_head() -> tuple[str | None, str | None]:
    """(the commit of the code being measured, None), or (None, why git could not say): a copy without
    ``.git``, a checkout git refuses to read ("dubious ownership"), no git at all."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)))
    except OSError as error:
        return None, f"git could not run: {error}"
    if done.returncode:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return None, "git rev-parse HEAD failed: " + (lines[0] if lines else f"exit code {done.returncode}")
    return done.stdout.strip(), None


def commit() -> str | None:
    return git_head()[0]


def write_json_atomic(path: str, data) -> None:
    """Write JSON so that a reader sees either the old file or the whole new one, never half."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True, default=str)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


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
    if isinstance(error, cases.Skip):
        return "skipped", str(error)
    if is_oom(error):
        return "oom", str(error).splitlines()[0]
    return "failed", "".join(traceback.format_exception_only(type(error), error)).strip()


def is_oom(error: BaseException) -> bool:
    """Out of memory on any device: torch's OutOfMemoryError (CUDA), or the CPU allocator's RuntimeError."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and ("out of memory" in str(error) or "can't allocate memory" in str(error)))
