"""Checks the command lines run before anything is measured: a bad value gets an error naming it and what
is allowed, while nothing has been spent or written yet.

    seconds          an argparse type: a finite number of seconds > 0 (NaN or inf would hang a timing loop)
    seconds_or_none  the same, or 0 for a step to skip
    count            an argparse type: a whole number >= 1 (check_count: the same for the Python API)
    writable_folder  a folder results or a report can be written into (created if missing)
    writable_file    a file path whose folder exists and is writable
    check_devices    the devices asked for exist on this machine
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import tempfile

import torch


def seconds(text: str) -> float:
    """argparse ``type=``: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def seconds_or_none(text: str) -> float:
    """argparse ``type=``: a finite number of seconds >= 0 (0: skip that step)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0 (0: none), got {text!r}")
    return value


def count(text: str) -> int:
    """argparse ``type=``: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


#: the most rounds a run may have: each is a pass over the whole grid (the default grid's takes minutes)
MAX_ROUNDS = 100


def rounds(text: str) -> int:
    """argparse ``type=`` for ``--rounds``: a whole number from 1 to MAX_ROUNDS."""
    value = count(text)
    if value > MAX_ROUNDS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_ROUNDS}, got {text!r} (each round "
                                         "is a pass over the whole grid)")
    return value


def check_count(name: str, value: int, maximum: int | None = None) -> int:
    """``count`` for the Python API: raise ValueError naming ``name`` (and ``maximum`` when there is one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (maximum and value > maximum):
        allowed = f"from 1 to {maximum}" if maximum else ">= 1"
        raise ValueError(f"{name} must be a whole number {allowed}, got {value!r}")
    return value


def check_seconds(name: str, value: float) -> float:
    """The same check for the Python API: raise ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


#: a machine's label: it names a folder (results/runs/<label>-<grid>), so letters, digits, '.', '_' and '-' only
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def label(text: str) -> str:
    """argparse ``type=`` for ``--machine``: a label that names a folder under results/ and nothing else."""
    if not LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a machine label: give 1 to 64 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit (it names the run folder results/runs/<label>-<grid>)")
    return text


def writable_folder(path: str, what: str) -> str:
    """Create ``path`` if needed and prove that a file can be written in it; else ValueError saying which
    path (``what``: the option or role, e.g. "--out") and why."""
    if os.path.islink(path) and not os.path.exists(path):
        raise ValueError(f"{what} {path!r} is a symbolic link to {os.readlink(path)!r}, which does not resolve (a "
                         "loop, or a missing target); give a folder")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{what} {path!r} is a file, not a folder; give a folder (it is created if missing)")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as error:
        raise ValueError(f"{what} {path!r}: cannot write there ({error.strerror or error})") from None
    return path


def check_free_space(path: str, needed: int, what: str, why: str) -> None:
    """ValueError naming ``path`` (``what``: the option), its free space and the ``needed`` bytes (``why``:
    what they are for) when the disk holding it has less free; checked before anything is measured."""
    free = shutil.disk_usage(path).free
    if free < needed:
        raise ValueError(f"{what} {path!r}: {_size(free)} free on its disk, and this run needs about {_size(needed)} "
                         f"({why}); free some space or give another {what}")


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def writable_file(path: str, what: str) -> str:
    """``path`` may be (over)written: not a folder, and its folder exists and takes a new file."""
    if os.path.isdir(path):
        raise ValueError(f"{what} {path!r} is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{what} {path!r}: the folder {folder!r} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as error:
        raise ValueError(f"{what} {path!r}: cannot write in {folder!r} ({error.strerror or error})") from None
    return path


def check_devices(devices) -> None:
    """Each device asked for by name is on this machine: asking for CUDA without one is an error before
    anything runs (a grid of skipped cases would look like a run that measured nothing)."""
    if devices and "cuda" in devices and not torch.cuda.is_available():
        raise ValueError("--device cuda: this machine has no CUDA device (torch.cuda.is_available() is False); "
                         "allowed here: cpu")
