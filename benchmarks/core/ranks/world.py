"""A grid spread over torchrun's ranks, and a rank that is stopped under it ending with one clear line.

Without torchrun (no RANK in the environment) there is one rank and nothing here changes anything.
"""

from __future__ import annotations

import os
import re
import signal
import sys

import torch
import torch.distributed as dist

from ..running.runner import Runner


class Ranks:
    """The grid spread over torchrun's ranks (one rank per machine or per GPU, so that ranks do not share
    cores): each rank measures every world-th case from its rank on and writes its records into the same
    folder (atomically, as always). Rank 0 measures the GEMM peaks first, the others read them. Without
    torchrun (no RANK in the environment) there is one rank and nothing changes."""

    def __init__(self):
        self.rank, self.world, self.dist = 0, 1, None
        if "RANK" in os.environ:
            if not dist.is_available() or not dist.is_backend_available("gloo"):
                raise ValueError("torchrun asked for several ranks, but this torch build has no "
                                 "torch.distributed gloo backend")
            dist.init_process_group("gloo")
            self.rank, self.world, self.dist = dist.get_rank(), dist.get_world_size(), dist

    def share(self, todo: list) -> list:
        return todo[self.rank::self.world]

    def calibrate_first(self, runner: Runner, todo: list) -> None:
        if self.dist is not None:
            if self.rank == 0:
                runner.calibrate(sorted({p["threads"] for a, p in todo if "threads" in p}))
            self.dist.barrier()

    def all_agree(self, ok: bool) -> bool:
        """Whether every rank says ``ok`` (one all-reduce; without torchrun, ``ok`` itself)."""
        if self.dist is None:
            return ok
        flag = torch.tensor([int(ok)], dtype=torch.int64)
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MIN)
        return bool(flag.item())

    def total(self, counts: dict[str, int]) -> dict[str, int]:
        """Every rank's counts summed (on every rank); waits for all ranks to finish."""
        if self.dist is None:
            return counts
        keys = sorted(counts)
        t = torch.tensor([counts[k] for k in keys], dtype=torch.int64)
        self.dist.all_reduce(t)
        return dict(zip(keys, t.tolist(), strict=True))

    def close(self) -> None:
        if self.dist is not None:
            self.dist.destroy_process_group()

    def guard(self, out: str, doing=lambda: None) -> RankGuard:
        return RankGuard(self.rank, self.world, out, doing)


class RankStopped(BaseException):
    """Raised in a rank that torchrun stops with SIGTERM: another rank failed, or the run was cancelled.
    A BaseException, so that no case catches it and records it as that case's failure."""


def _stopped(signum, frame):
    raise RankStopped("torchrun stopped this rank (another rank failed, or the run was cancelled)")


class RankGuard:
    """Under torchrun, a rank whose run stops under it (torchrun's SIGTERM after another rank died, or a
    collective whose peer vanished: gloo's "Connection closed by peer") ends with one clear line (which
    rank, what it was measuring, how many records the folder holds, all whole since each is written
    atomically when its case ends, and how to resume) and exit code 1, instead of dying silently or with a
    traceback. Other errors pass through. With one rank it does nothing."""

    def __init__(self, rank: int, world: int, out: str, doing=lambda: None):
        self.rank, self.world, self.out, self.doing, self.previous = rank, world, out, doing, None

    def __enter__(self) -> RankGuard:
        if self.world > 1:
            self.previous = signal.signal(signal.SIGTERM, _stopped)
        return self

    def __exit__(self, kind, error, tb) -> bool:
        if self.world == 1:
            return False
        signal.signal(signal.SIGTERM, self.previous)
        if not isinstance(error, (RankStopped, RuntimeError)):
            return False
        folder = os.path.join(self.out, "cases")
        kept = len([f for f in os.listdir(folder) if f.endswith(".json")]) if os.path.isdir(folder) else 0
        doing = self.doing()
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        first = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\] ", "", first)  # gloo's source location
        print(f"error: rank {self.rank} of {self.world} stopped" + (f" while measuring {doing}" if doing else "")
              + f": {first}. The {kept} records in {folder} are whole (each is written as soon as it is measured; "
              f"what was being measured has none); run the same command again to resume.", file=sys.stderr, flush=True)
        raise SystemExit(1)
