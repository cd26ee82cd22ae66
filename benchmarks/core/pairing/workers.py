"""A worker process as the controller of paired rounds (``mirrored.MirroredRounds``) holds it: started with one
version's models and the suite's cases (``mirrored_worker``, the process's own side), asked one JSON request per
line and answered in time, or named with its last words when it ends or stops answering."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

#: seconds a worker may take to answer one request (build every case, or time one block) before it counts as hung
WORKER_TIMEOUT_S = 600.0


class WorkerDied(RuntimeError):
    """A worker process that ended or stopped answering; the message names it and its last words."""


@dataclass
class Worker:
    """One version's worker process: ``label`` (base or head), ``models`` the folder of its ``transformer``
    package, ``suite`` the folder whose ``benchmarks`` package defines the cases (the same for both), ``env``
    what it runs with beyond this process's environment (``regime``: the one it reports, once started)."""

    label: str
    models: str
    suite: str
    env: dict = field(default_factory=dict)  # more environment, beyond this process's
    settle: int = 0  # calls a warm-up may add while a call still faults pages in (``measure.settle``, in the worker)
    regime: dict | None = None  # threads and runtime settings the worker runs in (records.regime, its own)
    proc: subprocess.Popen | None = None
    log: object = None
    _root: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    def start(self, todo: list[tuple[str, dict, str]]) -> list[str | None]:
        """Start the process and build every case; each case's error (None: built)."""
        self.launch(todo)
        return self.built()

    def launch(self, todo: list[tuple[str, dict, str]]) -> None:
        """Start the process and ask it to build every case, without waiting for it (``built`` does)."""
        self._root = tempfile.TemporaryDirectory(prefix=f"gate-{self.label}-")
        os.symlink(os.path.join(self.models, "transformer"), os.path.join(self._root.name, "transformer"))
        os.symlink(os.path.join(self.suite, "benchmarks"), os.path.join(self._root.name, "benchmarks"))
        self.log = tempfile.TemporaryFile(mode="w+")
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mirrored_worker.py")
        self.proc = subprocess.Popen([sys.executable, script, self._root.name], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=self._root.name,
                                     env={**os.environ, **self.env})
        self._send({"cases": [[a, p, m] for a, p, m in todo]})

    def built(self) -> list[str | None]:
        """Each case's error (None: built) once the process ``launch`` started has built them."""
        answer = self.answer()
        self.regime = answer.get("regime")
        return answer["errors"]

    def ask(self, request: dict, timeout: float = WORKER_TIMEOUT_S) -> dict:
        self._send(request)
        return self.answer(timeout)

    def _send(self, request: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._died("stopped reading its requests")) from None

    def answer(self, timeout: float = WORKER_TIMEOUT_S) -> dict:
        """The process's answer to the last request, within ``timeout`` s (WorkerDied: none)."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise WorkerDied(self._died(f"gave no answer within {timeout:g} s" if not ready else "ended"))
        answer = json.loads(line)
        if "error" in answer:
            raise WorkerDied(f"the {self.label} worker ({self.models}) failed: {answer['error']}")
        return answer

    def _died(self, how: str) -> str:
        try:  # a process whose output just closed may not have ended yet
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        self.log.seek(0)
        last = [line for line in self.log.read().strip().splitlines() if line.strip()][-3:]
        return (f"the {self.label} worker ({self.models}) {how}"
                + (f" (exit code {code})" if code is not None else "")
                + (": " + " | ".join(last) if last else ""))

    def quit(self) -> None:
        """Ask the process to end, without waiting for it (``stop`` does)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
                self.proc.stdin.flush()
            except OSError:
                pass

    def stop(self) -> None:
        self.quit()
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._root is not None:
            self._root.cleanup()
        if self.log is not None:
            self.log.close()
        self.proc = self.log = self._root = None
