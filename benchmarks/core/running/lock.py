"""One writer per run folder: a lock the measuring commands hold while they write into it.

Two runs writing into one folder overwrite each other's records and slow each other's times, so the
runner, the main job and the distributed command take ``<out>/.lock`` (an OS file lock, ``filelock``)
before anything is measured and hold it to the end; a second writer gets ``FolderBusy`` naming the
folder and the process that holds it. The OS releases the lock when its process dies, however it dies;
the holder's ``.lock.json`` stays behind, so the next writer says that it took the folder over from a
process that ended without releasing it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import sys

import filelock

from ..records import write_json_atomic

LOCK, OWNER = ".lock", ".lock.json"


class FolderBusy(ValueError):
    """Another process is writing into the run folder."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _owner(folder: str) -> dict | None:
    try:
        with open(os.path.join(folder, OWNER)) as f:
            owner = json.load(f)
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def _who(owner: dict | None) -> str:
    if not owner:
        return "another process (it left no name)"
    return (f"pid {owner.get('pid')} on {owner.get('host')} ({owner.get('command')}, started "
            f"{owner.get('started')})")


class FolderLock:
    """``with FolderLock(folder):`` holds the folder for this process; FolderBusy if another holds it."""

    def __init__(self, folder: str):
        self.folder = folder
        self.lock = filelock.FileLock(os.path.join(folder, LOCK), timeout=0)

    def acquire(self) -> FolderLock:
        os.makedirs(self.folder, exist_ok=True)
        try:
            self.lock.acquire()
        except filelock.Timeout:
            raise FolderBusy(f"{self.folder} is being written by {_who(_owner(self.folder))}: one writer per run "
                             "folder. Wait for it to finish, or pass another --out.") from None
        left = _owner(self.folder)
        if left and left.get("host") == socket.gethostname() and not _alive(int(left.get("pid", 0))):
            print(f"warning: took over {self.folder} from {_who(left)}, which ended without releasing it; its "
                  "records are whole (each is written atomically) and the run resumes from them", file=sys.stderr)
        command = " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]])[:120]
        write_json_atomic(os.path.join(self.folder, OWNER), {
            "pid": os.getpid(), "host": socket.gethostname(), "command": command,
            "started": dt.datetime.now().isoformat(timespec="seconds")})
        return self

    def release(self) -> None:
        if self.lock.is_locked:
            try:
                os.remove(os.path.join(self.folder, OWNER))
            except OSError:
                pass
            self.lock.release()

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
