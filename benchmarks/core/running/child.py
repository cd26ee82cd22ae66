"""A process the run starts (a round's process) ends with the run: a run killed by a signal runs no exit handler,
and would leave its child measuring, and loading the machine, with nobody to read its records."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: prctl's option that names the signal a process gets when its parent ends (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def end_with(parent: int, code: int) -> None:
    """End this process when the process ``parent`` ends: Linux's parent-death signal (SIGTERM), and exit
    ``code`` now if ``parent`` already ended. Elsewhere the process runs to its end."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        sys.exit(code)
