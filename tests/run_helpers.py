"""What the tests of run folders and command lines share: a short plan, a short sweep, the command lines."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks import profile
from benchmarks import runner as runner_cli
from benchmarks.core import runner
from reports.__main__ import main as reports_main

PLAN = [("models", {"model": "transformer", "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"}),
        ("models", {"model": "rnn-width", "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"})]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(folder, plan=PLAN, name="vm", rounds=1):
    runner.Runner(str(folder), min_run_time=0.01, name=name, rounds=rounds).run(plan, progress=False)
    return str(folder)


def files(folder):
    """Every file under ``folder`` with its bytes: what must not change."""
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.relpath(os.path.join(root, n), folder)] = f.read()
    return out


def cli(*args, module="reports"):
    """The command in a real subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def in_process(capsys, *args, module="reports"):
    """The command's main() in this process (faster); (exit code, stderr)."""
    main = {"reports": reports_main, "benchmarks.runner": runner_cli.main, "benchmarks.profile": profile.main}[module]
    try:
        code = main(list(args))
    except SystemExit as exit:  # argparse's errors
        code = exit.code
    return code, capsys.readouterr().err
