"""The benchmark cases and their grids, defined once.

The asv classes (``bench_*.py``), any in-process runner and the tests all read these, so a number
means the same thing wherever it was measured. Only the public API of ``transformer`` is used: asv
runs this suite against old commits too.

A grid maps each area to its axes; ``combinations(area, grid)`` lists the cases as dicts and
``select(area, grid, **fixed)`` picks a subset by value, with no regexes over reprs. The environment
variable ATTENTION_BENCH_GRID picks the grid the asv classes expose ("quick" unless set).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import record_function

from transformer import (
    MultiHeadAttention,
    RecurrentLayer,
    RNNAttention,
    RNNAttentionConfig,
    Transformer,
    TransformerConfig,
    flops,
    scaled_dot_product_attention,
)

try:  # asv's own skip marker, which also skips when raised in a benchmark's body
    from asv_runner.benchmarks.mark import SkipNotImplemented as _SkipBase
except ImportError:  # running outside asv
    _SkipBase = NotImplementedError

#: Tokens per attention call (batch x sequence length held fixed, as FlashAttention's benchmarks do).
TOKENS = {"cpu": 4096, "cuda": 16384}


def thread_counts(all_cores: int | None = None) -> list[int]:
    """1, 2, 4, ... up to all cores, and all cores itself (strong scaling)."""
    n = all_cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1
    counts = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return counts if counts[-1] == n else counts + [n]


@contextlib.contextmanager
def using_threads(threads: int | None):
    """Run the block on ``threads`` CPU threads (None: leave torch's setting), then restore it."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


#: The modes of the depth area: what each model runs (greedy generation makes seq_len new tokens).
MODES = ("forward", "train_step", "generate")

GRIDS: dict[str, dict[str, dict[str, list]]] = {
    "quick": {
        "attention": {"seq_len": [128, 512], "d_head": [64], "backend": ["math", "sdpa"], "causal": [False, True],
                      "dtype": ["float32"], "device": ["cpu", "cuda"]},
        "multihead": {"heads": [1, 8, 64], "strategy": ["batched", "looped", "sdpa"], "out_proj": [True],
                      "device": ["cpu", "cuda"]},
        "models": {"model": ["transformer", "rnn-width"], "preset": ["tiny"], "seq_len": [16, 64], "batch": [8],
                   "device": ["cpu", "cuda"]},
        "threads": {"workload": ["attention", "multihead", "transformer", "rnn-width"],
                    "threads": sorted({1, thread_counts()[-1]})},
        "layers": {"layer": ["self-attention", "recurrent"], "seq_len": [64, 256], "d_model": [128],
                   "device": ["cpu", "cuda"]},
        "depth": {"model": ["transformer", "rnn-width"], "preset": ["tiny"], "mode": list(MODES), "seq_len": [8, 16],
                  "device": ["cpu"]},
    },
    # What the README's main command measures and reports on: every analysis has its axes, and the
    # CPU half runs in about two minutes on 2 cores.
    "default": {
        "attention": {"seq_len": [128, 256, 512, 1024, 2048], "d_head": [64], "backend": ["math", "sdpa"],
                      "causal": [False], "dtype": ["float32"], "device": ["cpu", "cuda"]},
        "multihead": {"heads": [1, 2, 4, 8, 16, 32, 64], "strategy": ["batched", "looped", "sdpa"],
                      "out_proj": [True, False], "device": ["cpu", "cuda"]},
        "models": {"model": ["transformer", "rnn-width", "rnn-params"], "preset": ["tiny", "paper-base"],
                   "seq_len": [8, 16, 32, 64, 128], "batch": [8], "device": ["cpu", "cuda"]},
        "threads": {"workload": ["attention", "multihead", "transformer", "rnn-width"], "threads": thread_counts()},
        "layers": {"layer": ["self-attention", "recurrent"], "seq_len": [32, 64, 128, 256, 512, 1024],
                   "d_model": [128, 256, 512], "device": ["cpu", "cuda"]},
        "depth": {"model": ["transformer", "rnn-width"], "preset": ["tiny"], "mode": list(MODES),
                  "seq_len": [8, 16, 32, 64], "device": ["cpu"]},
    },
    "full": {
        "attention": {"seq_len": [128, 256, 512, 1024, 2048, 4096, 8192], "d_head": [64, 128],
                      "backend": ["math", "sdpa"], "causal": [False, True],
                      "dtype": ["float32", "float16", "bfloat16"], "device": ["cpu", "cuda"]},
        "multihead": {"heads": [1, 2, 4, 8, 16, 32, 64], "strategy": ["batched", "looped", "sdpa"],
                      "out_proj": [True, False], "device": ["cpu", "cuda"]},
        "models": {"model": ["transformer", "rnn-width", "rnn-params"], "preset": ["tiny", "paper-base"],
                   "seq_len": [16, 32, 64, 128, 256], "batch": [1, 8, 32], "device": ["cpu", "cuda"]},
        "threads": {"workload": ["attention", "multihead", "transformer", "rnn-width"], "threads": thread_counts()},
        "layers": {"layer": ["self-attention", "recurrent"], "seq_len": [16, 32, 64, 128, 256, 512, 1024, 2048],
                   "d_model": [128, 256, 512, 1024], "device": ["cpu", "cuda"]},
        "depth": {"model": ["transformer", "rnn-width"], "preset": ["tiny", "paper-base"], "mode": list(MODES),
                  "seq_len": [8, 16, 32, 64, 128], "device": ["cpu"]},
    },
}

#: The largest sequence length per device for the attention cases (score memory grows as n^2).
MAX_SEQ_LEN = {"cpu": 4096, "cuda": 8192}
MULTIHEAD_SHAPE = {"batch": 8, "seq_len": 256, "d_model": 512}
#: Table 1's layers: sequences per call, and the heads of the self-attention layer
LAYER_BATCH, LAYER_HEADS = 4, 8
GENERATE_STEPS = 16


#: The head-parallel cases (benchmarks.distributed, launched with torchrun): the module split over the
#: ranks, how the heads are combined, and the problem. Strong scaling holds a case fixed while the
#: ranks grow; weak scaling compares h heads on 1 rank with h x ranks heads on that many.
PARALLEL_GRIDS: dict[str, dict[str, list]] = {
    "quick": {"layer": ["attention"], "combine": ["allreduce", "allgather"], "heads": [4, 8], "seq_len": [64],
              "d_model": [64], "batch": [2]},
    "default": {"layer": ["attention", "encoder_layer"], "combine": ["allreduce", "allgather"], "heads": [8, 16],
                "seq_len": [128, 512], "d_model": [512], "batch": [4]},
}


def active_grid() -> str:
    name = os.environ.get("ATTENTION_BENCH_GRID", "quick")
    if name not in GRIDS:
        raise ValueError(f"ATTENTION_BENCH_GRID={name!r} is not a grid; allowed: {', '.join(GRIDS)}")
    return name


def axes(area: str, grid: str | None = None) -> dict[str, list]:
    grid = active_grid() if grid is None else grid
    if grid not in GRIDS:
        raise ValueError(f"unknown grid {grid!r}; allowed: {', '.join(GRIDS)}")
    if area not in GRIDS[grid]:
        raise ValueError(f"unknown area {area!r}; allowed: {', '.join(GRIDS[grid])}")
    return GRIDS[grid][area]


#: Cases a grid leaves out of its product to keep its cost: the default grid measures the paper-base
#: models (a realistic size, claim C1's second regime) at two lengths only, and W_O's absence on one
#: strategy.
SPARSE: dict[str, dict[str, Callable[[dict], bool]]] = {
    "default": {"models": lambda p: p["preset"] != "paper-base" or p["seq_len"] in (16, 64),
                # W_O's cost (out_proj False) is read on the batched strategy only
                "multihead": lambda p: p["out_proj"] or p["strategy"] == "batched"},
}


def on_grid(area: str, params: dict, grid: str | None = None) -> bool:
    """Whether a combination of the axes' values is one of the grid's cases (not left out by SPARSE)."""
    keep = SPARSE.get(active_grid() if grid is None else grid, {}).get(area)
    return keep is None or keep(params)


def combinations(area: str, grid: str | None = None) -> list[dict]:
    """Every case of one area in a grid, as {axis: value} dicts."""
    ax = axes(area, grid)
    product = (dict(zip(ax, values)) for values in itertools.product(*ax.values()))
    return [p for p in product if on_grid(area, p, grid)]


def select(area: str, grid: str | None = None, **fixed) -> list[dict]:
    """The cases whose axes equal the given values, e.g. ``select("attention", backend="sdpa")``."""
    unknown = set(fixed) - set(axes(area, grid))
    if unknown:
        raise ValueError(f"unknown axes {sorted(unknown)} for area {area!r}; axes: {list(axes(area, grid))}")
    return [c for c in combinations(area, grid) if all(c[k] == v for k, v in fixed.items())]


#: The CPU workloads of the strong-scaling area: one fixed case of another area each (claim C1).
THREAD_WORKLOADS = {
    "attention": ("attention", {"seq_len": 512, "d_head": 64, "backend": "sdpa", "causal": False,
                                "dtype": "float32", "device": "cpu"}),
    "multihead": ("multihead", {"heads": 8, "strategy": "batched", "out_proj": True, "device": "cpu"}),
    "transformer": ("models", {"model": "transformer", "preset": "tiny", "seq_len": 64, "batch": 8, "device": "cpu"}),
    "rnn-width": ("models", {"model": "rnn-width", "preset": "tiny", "seq_len": 64, "batch": 8, "device": "cpu"}),
}

#: Named sets of cases for ``python -m benchmarks.profile --set``: (area, params, method). "default" is
#: what the README's main command profiles: both models at the tiny and the paper-base size (the two
#: regimes of claim C1), the heads at both ends of h for each strategy (C3/C4), and equation (1) written
#: out at a long sequence (what holds the memory).
PROFILE_SETS: dict[str, list[tuple[str, dict, str]]] = {
    "quick": [
        ("models", {"model": m, "preset": "tiny", "seq_len": 16, "batch": 8, "device": "cpu"}, "forward")
        for m in ("transformer", "rnn-width")
    ] + [("multihead", {"heads": 8, "strategy": "batched", "out_proj": True, "device": "cpu"}, "forward")],
    "default": [
        ("models", {"model": m, "preset": p, "seq_len": n, "batch": 8, "device": "cpu"}, "forward")
        for p, n in (("tiny", 128), ("paper-base", 64)) for m in ("transformer", "rnn-width")
    ] + [
        ("multihead", {"heads": h, "strategy": s, "out_proj": True, "device": "cpu"}, "forward")
        for s in ("batched", "looped", "sdpa") for h in (1, 64)
    ] + [
        ("attention", {"seq_len": 1024, "d_head": 64, "backend": b, "causal": False, "dtype": "float32",
                       "device": "cpu"}, "forward") for b in ("math", "sdpa")
    ],
}


def profile_set(name: str) -> list[tuple[str, dict, str]]:
    if name not in PROFILE_SETS:
        raise ValueError(f"unknown profile set {name!r}; allowed: {', '.join(PROFILE_SETS)}")
    return PROFILE_SETS[name]


#: What each area times: forward always; a training step and greedy generation where they exist.
#: The depth area measures no time: its one method records the executed graph (benchmarks.opgraph).
METHODS = {"attention": ("forward",), "multihead": ("forward", "train_step"),
           "models": ("forward", "train_step", "generate"), "threads": ("forward",), "layers": ("forward",),
           "depth": ("graph",)}


def tokens(area: str, params: dict, method: str = "forward") -> int:
    """Tokens one call of ``method`` processes (the throughput denominator), from the case's parameters
    alone, so that results without a record of it (asv's) get the same tokens/s as the runner's."""
    if area == "threads":
        inner, fixed = THREAD_WORKLOADS[params["workload"]]
        return tokens(inner, fixed, method)
    n = params.get("seq_len", MULTIHEAD_SHAPE["seq_len"])
    if area == "attention":
        return max(1, TOKENS[params["device"]] // n) * n
    if area == "multihead":
        return MULTIHEAD_SHAPE["batch"] * n
    if area == "models":
        return params["batch"] * (GENERATE_STEPS if method == "generate" else n)
    if area == "layers":
        return LAYER_BATCH * n
    if area == "depth":
        return DEPTH_BATCH * n
    raise ValueError(f"unknown area {area!r}; allowed: {', '.join(METHODS)}")


class Skip(_SkipBase):
    """A case this machine cannot run (asv skips a benchmark whose setup raises NotImplementedError)."""


@dataclass
class Prepared:
    """A built case: callables to time (each synchronizes its device), its analytic FLOPs, the tokens
    one call processes, its device and dtype, and the CPU threads it runs on (None: torch's default)."""

    forward: Callable[[], Any]
    flops: flops.Flops
    tokens: int
    device: str = "cpu"
    dtype: str = "float32"
    train_step: Callable[[], Any] | None = None
    generate: Callable[[], Any] | None = None
    generate_flops: flops.Flops | None = None
    generate_tokens: int | None = None
    threads: int | None = None
    graph_only: bool = False  # a depth case: its one callable is recorded, not timed

    def work(self, method: str) -> tuple[Callable[[], Any], flops.Breakdown, int]:
        """The callable a method times, its FLOPs (forward, or forward + backward) and its tokens."""
        if method == "forward":
            return self.forward, self.flops.forward, self.tokens
        if method == "train_step" and self.train_step is not None:
            return self.train_step, self.flops.train, self.tokens
        if method == "generate" and self.generate is not None:
            return self.generate, self.generate_flops.forward, self.generate_tokens
        if method == "graph" and self.graph_only:
            return self.forward, self.flops.forward, self.tokens
        raise ValueError(f"this case has no method {method!r}; allowed: {', '.join(self.methods())}")

    def methods(self) -> list[str]:
        if self.graph_only:
            return ["graph"]
        return ["forward"] + [m for m in ("train_step", "generate") if getattr(self, m) is not None]


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise Skip("no CUDA device on this machine")
    return torch.device(name)


def _synchronized(fn: Callable[[], Any], device: torch.device) -> Callable[[], Any]:
    if device.type != "cuda":
        return fn

    def run():
        out = fn()
        torch.cuda.synchronize(device)
        return out

    return run


def _train_step(module: torch.nn.Module, call: Callable[[], torch.Tensor]) -> Callable[[], None]:
    def step():
        module.zero_grad(set_to_none=True)
        out = call()
        with record_function("loss"):
            loss = out.float().sum()
        with record_function("backward"):
            loss.backward()

    return step


def build(area: str, params: dict) -> Prepared:
    """Build one case of ``area`` from its parameters (one dict of ``combinations``)."""
    builders = {"attention": attention_case, "multihead": multihead_case, "models": model_case,
                "threads": threads_case, "layers": layer_case, "depth": depth_case}
    if area not in builders:
        raise ValueError(f"unknown area {area!r}; allowed: {', '.join(builders)}")
    return builders[area](**params)


def attention_case(seq_len: int, d_head: int, backend: str, causal: bool, dtype: str, device: str) -> Prepared:
    """Equation (1) on (batch, 8 heads, n, d_head), batch * n = TOKENS[device]."""
    dev = _device(device)
    if dev.type == "cpu" and dtype != "float32":
        raise Skip(f"dtype {dtype} is benchmarked on GPUs only")
    if seq_len > MAX_SEQ_LEN[dev.type]:
        raise Skip(f"seq_len {seq_len} is above this device's cap {MAX_SEQ_LEN[dev.type]}")
    heads, batch = 8, tokens("attention", {"seq_len": seq_len, "device": dev.type}) // seq_len
    q, k, v = (torch.randn(batch, heads, seq_len, d_head, device=dev, dtype=getattr(torch, dtype)) for _ in range(3))

    def call():
        return scaled_dot_product_attention(q, k, v, causal=causal, backend=backend)

    f = flops.attention(batch * heads, seq_len, seq_len, d_head, backend=backend, causal=causal, device=dev,
                        dtype=getattr(torch, dtype))
    return Prepared(_synchronized(torch.no_grad()(call), dev), f, tokens=batch * seq_len, device=dev.type,
                    dtype=dtype)


def multihead_case(heads: int, strategy: str, out_proj: bool, device: str) -> Prepared:
    """MultiHeadAttention at fixed d_model = 512 (claims C3, C4): same matmul FLOPs for every h."""
    dev = _device(device)
    s = MULTIHEAD_SHAPE
    m = MultiHeadAttention(s["d_model"], heads, strategy=strategy, out_proj=out_proj, device=dev)
    x = torch.randn(s["batch"], s["seq_len"], s["d_model"], device=dev)
    f = flops.multi_head_attention(s["batch"], s["seq_len"], s["d_model"], heads, strategy=strategy,
                                   out_proj=out_proj, device=dev)
    return Prepared(_synchronized(torch.no_grad()(lambda: m(x)), dev), f, tokens=s["batch"] * s["seq_len"],
                    device=dev.type, train_step=_synchronized(_train_step(m, lambda: m(x)), dev))


def model_config(model: str, preset: str) -> TransformerConfig | RNNAttentionConfig:
    tf = TransformerConfig.preset(preset, dropout=0.0)
    if model == "transformer":
        return tf
    if model in ("rnn-width", "rnn-params"):
        return RNNAttentionConfig.matching(tf, model.removeprefix("rnn-"))
    raise ValueError(f"unknown model {model!r}; allowed: 'transformer', 'rnn-width', 'rnn-params'")


def _model_and_tokens(model: str, preset: str, batch: int, seq_len: int, dev: torch.device):
    """The model (built on ``dev``), whether it is the Transformer, and random source and target tokens."""
    config = model_config(model, preset)
    is_tf = isinstance(config, TransformerConfig)
    m = (Transformer if is_tf else RNNAttention)(config, device=dev)
    src = torch.randint(0, config.src_vocab, (batch, seq_len), device=dev)
    tgt = torch.randint(0, config.tgt_vocab, (batch, seq_len), device=dev)
    return m, config, is_tf, src, tgt


def model_case(model: str, preset: str, seq_len: int, batch: int, device: str) -> Prepared:
    """Transformer vs RNNsearch on the same tokens (claim C1): teacher-forced forward, a training step,
    and greedy generation of GENERATE_STEPS tokens; source and target both seq_len long."""
    dev = _device(device)
    m, config, is_tf, src, tgt = _model_and_tokens(model, preset, batch, seq_len, dev)
    if is_tf:
        f = flops.transformer(config, batch, seq_len, seq_len, device=dev)
        g = flops.transformer_generate(config, batch, seq_len, GENERATE_STEPS)
    else:
        f = flops.rnn_attention(config, batch, seq_len, seq_len)
        g = flops.rnn_attention_generate(config, batch, seq_len, GENERATE_STEPS)

    def generate():
        return m.generate(src, GENERATE_STEPS, bos_id=0)

    return Prepared(
        forward=_synchronized(torch.no_grad()(lambda: m(src, tgt)), dev),
        flops=f,
        tokens=batch * seq_len,
        device=dev.type,
        train_step=_synchronized(_train_step(m, lambda: m(src, tgt)), dev),
        generate=_synchronized(generate, dev),
        generate_flops=g,
        generate_tokens=batch * GENERATE_STEPS,
    )


def threads_case(workload: str, threads: int) -> Prepared:
    """One fixed CPU case (THREAD_WORKLOADS) run on ``threads`` threads: strong scaling (claim C1)."""
    if workload not in THREAD_WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; allowed: {', '.join(THREAD_WORKLOADS)}")
    available = thread_counts()[-1]
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int; got {threads!r}")
    if threads > available:
        raise Skip(f"threads {threads} is above this machine's {available} cores")
    area, params = THREAD_WORKLOADS[workload]
    prepared = build(area, params)
    prepared.train_step = prepared.generate = prepared.generate_flops = prepared.generate_tokens = None
    prepared.threads = threads
    return prepared


def layer_case(layer: str, seq_len: int, d_model: int, device: str) -> Prepared:
    """Table 1: a self-attention layer (8 heads, fused SDPA, with projections; 8nd² + 4n²d FLOPs) against
    a recurrent layer (a GRU; 12nd²) on LAYER_BATCH sequences of n tokens. Their FLOPs cross at n = d."""
    dev = _device(device)
    x = torch.randn(LAYER_BATCH, seq_len, d_model, device=dev)
    if layer == "self-attention":
        m = MultiHeadAttention(d_model, LAYER_HEADS, strategy="sdpa", device=dev)
        f = flops.multi_head_attention(LAYER_BATCH, seq_len, d_model, LAYER_HEADS, strategy="sdpa", device=dev)
    elif layer == "recurrent":
        m = RecurrentLayer(d_model, device=dev)
        f = flops.recurrent_layer(LAYER_BATCH, seq_len, d_model)
    else:
        raise ValueError(f"unknown layer {layer!r}; allowed: 'self-attention', 'recurrent'")
    return Prepared(_synchronized(torch.no_grad()(lambda: m(x)), dev), f, tokens=LAYER_BATCH * seq_len,
                    device=dev.type)


#: Sequences per call in the depth area (the executed graph does not depend on the batch).
DEPTH_BATCH = 1


def depth_case(model: str, preset: str, mode: str, seq_len: int, device: str) -> Prepared:
    """The graph one call executes (claim C1, Table 1's sequential operations): a teacher-forced forward,
    a training step, or greedy generation of seq_len new tokens, on source (and target) of seq_len tokens.
    Its one method, "graph", is recorded by benchmarks.opgraph: sequential depth and launches."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    dev = _device(device)
    m, config, is_tf, src, tgt = _model_and_tokens(model, preset, DEPTH_BATCH, seq_len, dev)
    if mode == "generate":
        f = (flops.transformer_generate(config, DEPTH_BATCH, seq_len, seq_len) if is_tf else
             flops.rnn_attention_generate(config, DEPTH_BATCH, seq_len, seq_len))
        fn, work = (lambda: m.generate(src, seq_len, bos_id=0)), f.forward
    else:
        f = (flops.transformer(config, DEPTH_BATCH, seq_len, seq_len, device=dev) if is_tf else
             flops.rnn_attention(config, DEPTH_BATCH, seq_len, seq_len))
        if mode == "forward":
            fn, work = torch.no_grad()(lambda: m(src, tgt)), f.forward
        else:
            fn, work = _train_step(m, lambda: m(src, tgt)), f.train
    return Prepared(_synchronized(fn, dev), flops.Flops(work, flops.Breakdown()), tokens=DEPTH_BATCH * seq_len,
                    device=dev.type, graph_only=True)
