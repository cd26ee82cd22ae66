"""The host-side constants of a machine (``constants.measure``): what one dispatch costs beyond its work (a computing
operator, a view, a ``record_function`` scope, an ``nn.Module`` call; on a GPU the first is the launch latency), and
the time of a small module-style workload (what a line of model code and a backward node cost). Each is timed at
MOMENTS spread over the constants' measurement, and the least timing kept (``least``).
"""

from __future__ import annotations

import torch
import torch.utils.benchmark as tb

from .. import opgraph

#: tiny dispatches timed back to back for each overhead
TINY_OPS = 1000
#: the dispatch overheads measured, and what each is
OVERHEADS = {"op": "a computing operator on a one-element tensor (on a GPU: its launch)",
             "view": "a view (no data moved)", "scope": "a record_function scope (enter and exit)",
             "module": "an nn.Module call (an Identity)"}


def seconds(stmt, min_run_time: float) -> float:
    """Median seconds of one call of ``stmt`` at the current thread count (torch.utils.benchmark, which
    synchronizes CUDA; its Timer runs on one thread unless told otherwise)."""
    timer = tb.Timer(stmt="stmt()", globals={"stmt": stmt}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def overheads(device: str = "cpu", ops: int = TINY_OPS, min_run_time: float = 0.2) -> dict[str, float]:
    """Seconds each kind of dispatch (OVERHEADS) costs beyond its work: ``ops`` of them back to back."""
    x, y, z = (torch.ones(1, device=device) for _ in range(3))
    identity = torch.nn.Identity()

    def scope():
        with torch.profiler.record_function("scope"):
            pass

    one = {"op": lambda: torch.add(x, y, out=z), "view": lambda: x.view(1), "scope": scope,
           "module": lambda: identity(x)}
    out = {}
    for name, fn in one.items():
        def many(fn=fn):
            for _ in range(ops):
                fn()

        out[name] = seconds(many, min_run_time) / ops
    return out


class _Block(torch.nn.Module):
    """Module-style Python on tiny tensors (``host``): a projection, a reshape into heads, scores, a softmax, a
    residual and a norm."""

    def __init__(self, d: int = 8, heads: int = 2):
        super().__init__()
        self.proj, self.norm, self.heads = torch.nn.Linear(d, d), torch.nn.LayerNorm(d), heads
        self.scale = (d // heads) ** -0.5

    def forward(self, x):
        b, n, d = x.shape
        q = self.proj(x).view(b, n, self.heads, d // self.heads).transpose(1, 2)
        w = torch.softmax(q @ q.transpose(-2, -1) * self.scale, dim=-1)
        return self.norm(x + (w @ q).transpose(1, 2).reshape(b, n, d))


#: blocks in the host workload
HOST_BLOCKS = 4


def host(device: str = "cpu", min_run_time: float = 0.2, cache: int | None = None, counted: dict | None = None) -> dict:
    """The host-side cost of model code: a stack of HOST_BLOCKS ``_Block`` on a (1, 4, 8) tensor, forward
    without gradients and a training step, each with its seconds, the Python lines it runs and the operators and
    dispatches it executes (``opgraph.record``, one call, its operators summed against a last-level ``cache`` of so
    many bytes; taken from ``counted``, an earlier result, where given). ``perfmodel.Constants.measured`` takes from
    them what a Python line and a backward node cost beyond everything else it prices."""
    model = torch.nn.Sequential(*[_Block() for _ in range(HOST_BLOCKS)]).to(device)
    x = torch.randn(1, 4, 8, device=device)

    def train():
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    out = {}
    for name, fn in (("forward", torch.no_grad()(lambda: model(x))), ("train", train)):
        fn()
        if counted is None:
            graph = opgraph.record(fn, lines=True)
            dispatches = dict(graph.dispatches)
            out[name] = {"lines": dispatches.pop("line"), "ops": graph.summary(cache),
                         "dispatches": dispatches}
        else:
            out[name] = {k: v for k, v in counted[name].items() if k != "seconds"}
        out[name]["seconds"] = seconds(fn, min_run_time)
    return out


#: moments the host-side constants (the dispatch overheads and the host workload) are timed at, spread over the
#: measurement (before the kernels, after them, at the end); each is the least of its timings: a cost that other work
#: on the cores only adds to (a busy spell of a few seconds doubled the host workload's time in one measurement
#: here, and with it every overhead-bound case's prediction) misses some of them
MOMENTS = 3


def least(timed: list[dict]) -> dict:
    """The host-side constants timed at several moments (``measure``'s): each overhead's least seconds, and the host
    workload's timing of least seconds per name."""
    return {"overhead_s": {k: min(t["overhead_s"][k] for t in timed) for k in timed[0]["overhead_s"]},
            "host": {name: min((t["host"][name] for t in timed), key=lambda h: h["seconds"])
                     for name in timed[0]["host"]}}
