"""The graph of aten operators a call actually executed: sequential depth, launches and FLOPs per label.

``record(fn)`` runs ``fn`` under a ``TorchDispatchMode`` that sees every aten operator after autograd
and decomposition (what runs, forward and backward), and for each one notes:

- its **depth**: one more than the deepest of its tensor inputs (inputs made before the call have
  depth 0). The depth of the call is the number of operators on its critical path: the work that
  must run one after another however many cores or GPUs there are (claim C1, Table 1's "sequential
  operations"). It is measured on the executed graph, not derived from the code or a formula.
- whether it is a **launch**: an operator that computes. View operators (``transpose``, ``view``,
  ``chunk``, ...) alias their input and launch nothing: they add no depth and are not counted.
- the **bytes** of the tensors it read and wrote (what a memory-bound operator costs: ``perfmodel``), and
  which storages: ``mark_cold`` replays them through a cache of the machine's size to find the bytes an
  operator reads from memory beyond it (a large model's weights);
- the **shape** of a matrix product, (batch, m, n, k) for ``mm``/``addmm``/``bmm``, or of a fused
  attention kernel, (batch x heads, query length, key length, head dim), so that a model can price it at
  the rate the machine reaches at that shape;
- its **matmul FLOPs**, from torch.utils.flop_counter's own formulas (the ones FlopCounterMode uses;
  see ``transformer.flops.count``), and the ``record_function`` labels around it, so that FLOPs can be
  summed per model component.

Depth is tracked per storage: an in-place write (``copy_``, ``masked_fill_``) raises the depth of the
storage it writes, and views share their base's depth. Labels come from the ``record_function``
enter/exit operators, which pass through the same dispatcher.
"""

from __future__ import annotations

import os
import sys
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

# a module, its names read when called: asv runs this suite against older commits of transformer
from transformer import flops

#: operators that move no data and compute nothing, beyond the aliasing views (func.is_view)
#: (``_unsafe_view`` is a view whose schema does not say so)
_FREE = {"aten.detach.default", "aten.lift_fresh.default", "aten._unsafe_view.default"}
#: operators that read only the rows of their first input (a table) that they write out: its bytes read are
#: its output's, not the whole table's (an embedding lookup touches batch x length rows of the vocabulary)
_GATHERS = {"aten.embedding.default", "aten.index_select.default"}


@dataclass
class Op:
    """One executed operator: its name, the labels around it (outermost first), depth, matmul FLOPs and the
    bytes of the tensors it read and wrote (each input and output once, as its shape has them)."""

    name: str
    labels: tuple[str, ...]
    depth: int
    flops: int
    bytes: int = 0
    shape: tuple[int, ...] = ()
    #: bytes of the tensors it wrote (its outputs: fresh memory when the allocator hands out new pages)
    written: int = 0
    #: the storages it read, (address, storage bytes, bytes used), and wrote, (address, storage bytes)
    reads: tuple = ()
    writes: tuple = ()
    #: bytes it read from outside a cache of the size ``OpGraph.summary`` was given (``mark_cold``)
    cold: int = 0


@dataclass
class OpGraph:
    """What ``record`` saw: the launched operators in execution order, and the other dispatches the call
    made (``dispatches``: views and free operators, ``record_function`` scopes, ``nn.Module`` calls, and the
    backward nodes that ran operators)."""

    ops: list[Op] = field(default_factory=list)
    dispatches: Counter = field(default_factory=Counter)

    def summary(self, cache_bytes: int | None = None) -> list[dict]:
        """The operators grouped by what prices them (name, FLOPs, bytes, shape, bytes written and, with a
        cache of ``cache_bytes``, bytes read from beyond it) with a count each: a call's work in a few rows
        (JSON-ready; ``perfmodel.predict`` reads them)."""
        if cache_bytes:
            self.mark_cold(cache_bytes)
        rows = Counter((op.name, op.flops, op.bytes, op.shape, op.written, op.cold) for op in self.ops)
        return [{"name": n, "flops": f, "bytes": b, "shape": list(s), "written": w, "cold": cold, "count": c}
                for (n, f, b, s, w, cold), c in rows.items()]

    def mark_cold(self, cache_bytes: int) -> None:
        """Set each operator's ``cold`` bytes: what it read that a least-recently-used cache of
        ``cache_bytes`` would not hold, in the steady state of calls made back to back (the sequence is
        replayed and the second pass counted). A model's weights come from memory where the rest of the
        call has pushed them out of the cache since their last use; a tensor made by the operator before
        is still there."""
        cache: OrderedDict[int, int] = OrderedDict()
        held = 0
        for counting in (False, True):
            for op in self.ops:
                cold = 0
                for key, size, used in op.reads:
                    if key in cache:
                        cache.move_to_end(key)
                    else:
                        cold += used
                        cache[key], held = size, held + size
                for key, size in op.writes:
                    held += size - cache.pop(key, 0)
                    cache[key] = size
                while held > cache_bytes and cache:
                    held -= cache.popitem(last=False)[1]
                if counting:
                    op.cold = cold

    @property
    def depth(self) -> int:
        """Operators on the critical path (the longest chain of dependent launches)."""
        return max((op.depth for op in self.ops), default=0)

    @property
    def launches(self) -> int:
        """Operators launched (views excluded)."""
        return len(self.ops)

    @property
    def matmul_flops(self) -> int:
        return sum(op.flops for op in self.ops)

    def flops_by(self, key: Callable[[tuple[str, ...]], str]) -> dict[str, int]:
        """Matmul FLOPs summed by ``key(labels)``, e.g. the innermost label."""
        out: Counter = Counter()
        for op in self.ops:
            if op.flops:
                out[key(op.labels)] += op.flops
        return dict(out)

    def launches_by(self, key: Callable[[tuple[str, ...]], str]) -> dict[str, int]:
        return dict(Counter(key(op.labels) for op in self.ops))


def _tensors(obj) -> list[torch.Tensor]:
    """The tensors in an operator's arguments or result (tensors, and lists, tuples and dicts of them: all an
    aten schema holds; faster than pytree, which the recorder would otherwise spend half its time in)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _tensors(x)]
    return []


def _shape(name: str, args) -> tuple[int, ...]:
    """(batch, m, n, k) of a matrix product C (m x n) = A (m x k) B (k x n) done ``batch`` times; (batch x
    heads, query length, key length, head dim) of a fused attention kernel; () for anything else."""
    base = name.split(".")[1] if "." in name else name
    if base in ("mm", "addmm", "bmm", "baddbmm"):
        a, b = args[-2].shape, args[-1].shape
        return (a[0] if len(a) == 3 else 1, a[-2], b[-1], a[-1])
    if base.startswith("_scaled_dot_product") and "attention" in base:
        q, k = args[1:3] if base.endswith("_backward") else args[:2]
        return (q[..., 0, 0].numel(), q.shape[-2], k.shape[-2], q.shape[-1])
    return ()


#: the autograd node whose backward is running (None outside a backward), where this torch has it
_current_node = getattr(torch._C, "_current_autograd_node", lambda: None)


def _flop_formula(func) -> Callable | None:
    flops.register_cpu_sdpa_formulas()
    return flop_registry.get(func._overloadpacket)


def _facts(t: torch.Tensor) -> tuple[int | None, int, int]:
    """(its storage's address, or None for a meta or empty tensor; its storage's bytes; its own bytes, as its
    shape has them): one storage lookup per tensor, which is most of what the recorder pays per operator."""
    if t.device.type == "meta" or t.numel() == 0:
        return None, 0, 0
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes(), t.numel() * t.element_size()


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.graph = OpGraph()
        self.depth: dict[int, int] = {}  # storage address -> depth of its latest write
        self.labels: list[str] = []  # the record_function labels open now, outermost first
        self.kinds: dict = {}  # operator -> (name, "scope", "view" or "op", its FLOP formula, whether it gathers)
        self.node = None  # the autograd node whose backward ran the last operator

    def _kind(self, func) -> tuple:
        if func not in self.kinds:
            name = str(func)
            kind = "scope" if func.namespace == "profiler" else "view" if func.is_view or name in _FREE else "op"
            self.kinds[func] = (name, kind, _flop_formula(func) if kind == "op" else None, name in _GATHERS)
        return self.kinds[func]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name, kind, formula, gathers = self._kind(func)
        if kind == "scope":
            out = func(*args, **kwargs)
            if "enter" in name:
                self.labels.append(args[0])
                self.graph.dispatches["scope"] += 1
            elif "exit" in name and self.labels:  # record_function scopes nest: the innermost exits first
                self.labels.pop()
            return out
        node = _current_node()
        if node is not None and node is not self.node:  # the backward engine moved on to another node
            self.graph.dispatches["node"] += 1
        self.node = node
        out = func(*args, **kwargs)
        if kind == "view":
            self.graph.dispatches["view"] += 1
            return out
        ins = [_facts(t) for t in _tensors((args, kwargs))]
        depth = max((self.depth.get(k, 0) for k, _, _ in ins if k is not None), default=0) + 1
        outs = [_facts(t) for t in _tensors(out)]
        for k, _, _ in outs:
            if k is not None:
                self.depth[k] = depth
        flops = 0 if formula is None else int(formula(*args, **kwargs, out_val=out))  # the registry's convention
        out_bytes = sum(b for _, _, b in outs)
        read = ins[1:] if gathers else ins
        moved = out_bytes + sum(b for _, _, b in read) + (out_bytes if gathers else 0)
        shape = _shape(name, args) if flops else ()
        reads = tuple((k, size, b) for k, size, b in read if k is not None)
        if gathers and ins[0][0] is not None:  # the rows it gathers from the table
            reads += ((ins[0][0], ins[0][1], out_bytes),)
        writes = tuple((k, size) for k, size, _ in outs if k is not None)
        self.graph.ops.append(Op(name, tuple(self.labels), depth, flops, moved, shape, out_bytes, reads, writes))
        return out


def record(fn: Callable[[], Any], lines: bool = False) -> OpGraph:
    """Run ``fn()`` once and return the graph of operators it executed (forward and any backward); with
    ``lines``, its dispatches also count the Python lines the call ran (``"line"``: ``_LineCounter``)."""
    recorder = _Recorder()
    if lines:
        counter, previous = _LineCounter(recorder.graph.dispatches), sys.gettrace()
        with recorder:
            sys.settrace(counter.call)
            try:
                fn()
            finally:
                sys.settrace(previous)
        return recorder.graph
    calls = recorder.graph.dispatches
    hook = torch.nn.modules.module.register_module_forward_pre_hook(lambda *_: calls.update(("module",)))
    try:
        with recorder:
            fn()
    finally:
        hook.remove()
    return recorder.graph


#: the Python that runs a dispatch mode, not the call: the recorder's handler and torch's lookup of per-operator
#: rules before it (torch/_library), with everything they call
_MODE_CODE = _Recorder.__torch_dispatch__.__code__
_MODE_FILES = os.path.join(os.path.dirname(torch.__file__), "_library", "")
#: the frame of every nn.Module call (what a global forward hook would count, without the lines it adds)
_MODULE_CALL = torch.nn.Module._call_impl.__code__


class _LineCounter:
    """Counts into ``dispatches`` the Python lines a call runs (``call``, the ``sys.settrace`` function; every
    file, torch's included: the host-side work between operators) and its nn.Module calls, leaving out the
    lines of the recorder's dispatch mode: the same lines as the call without the recorder (held by the tests)."""

    def __init__(self, dispatches: Counter):
        self.dispatches, self.inside = dispatches, 0
        dispatches["line"] += 0

    def line(self, frame, event, arg):
        if event == "line":
            self.dispatches["line"] += 1
        return self.line

    def leaving(self, frame, event, arg):
        if event == "return":
            self.inside -= 1
        return self.leaving

    def call(self, frame, event, arg):
        if self.inside:
            return None
        code = frame.f_code
        if code is _MODE_CODE or code.co_filename.startswith(_MODE_FILES):
            self.inside += 1
            return self.leaving
        if code is _MODULE_CALL:
            self.dispatches["module"] += 1
        return self.line
