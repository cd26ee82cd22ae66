"""The benchmark cases, defined once: how each area's case is built, with its grid (``benchmarks.grids``).

The asv classes (``bench_*.py``), any in-process runner and the tests all read these, so a number
means the same thing wherever it was measured. Only the public API of ``transformer`` is used: asv
runs this suite against old commits too. ``build(area, params)`` returns a ``Prepared`` case; the grids'
names (``GRIDS``, ``combinations``, ``select``, ...) are read through this module too.
"""

from __future__ import annotations

import contextlib
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

from .grids import (
    DEPTH_BATCH,
    GENERATE_STEPS,
    GRIDS,
    LAYER_BATCH,
    LAYER_HEADS,
    MAX_SEQ_LEN,
    METHODS,
    MODES,
    MULTIHEAD_SHAPE,
    PARALLEL_GRIDS,
    PROFILE_SETS,
    SPARSE,
    SPARSE_METHODS,
    THREAD_WORKLOADS,
    TOKENS,
    active_grid,
    axes,
    combinations,
    method_on_grid,
    on_grid,
    profile_set,
    restrict,  # noqa: F401 (read through this module, as the other names)
    select,
    thread_counts,
    tokens,
)

try:  # asv's own skip marker, which also skips when raised in a benchmark's body
    from asv_runner.benchmarks.mark import SkipNotImplemented as _SkipBase
except ImportError:  # running outside asv
    _SkipBase = NotImplementedError

#: a case's whole definition from one module: how it is built (here) and its grid (``benchmarks.grids``)
__all__ = [
    "Prepared", "Skip", "attention_case", "build", "depth_case", "layer_case", "model_case", "model_config",
    "multihead_case", "threads_case", "using_threads",
    "DEPTH_BATCH", "GENERATE_STEPS", "GRIDS", "LAYER_BATCH", "LAYER_HEADS", "MAX_SEQ_LEN", "METHODS", "MODES",
    "MULTIHEAD_SHAPE", "PARALLEL_GRIDS", "PROFILE_SETS", "SPARSE", "SPARSE_METHODS", "THREAD_WORKLOADS", "TOKENS",
    "active_grid", "axes", "combinations", "method_on_grid", "on_grid", "profile_set", "select", "thread_counts",
    "tokens",
]


@contextlib.contextmanager
def using_threads(threads: int | None):
    """Run the block on ``threads`` CPU threads, then restore the count; None leaves torch's setting alone,
    uncalled: ``torch.set_num_threads`` called at all, even with the count torch already has, slows the
    process's small operators for the rest of its life (``scripts/regime_effects.py``, setting
    ``threads-set``), and a user's process never calls it unless they choose the threads."""
    if threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)



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


def layer_flops(layer: str, seq_len: int, d_model: int, device="cpu") -> flops.Flops:
    """The FLOP model of one of Table 1's layers (the layers area's case) on LAYER_BATCH sequences."""
    if layer == "self-attention":
        return flops.multi_head_attention(LAYER_BATCH, seq_len, d_model, LAYER_HEADS, strategy="sdpa", device=device)
    if layer == "recurrent":
        return flops.recurrent_layer(LAYER_BATCH, seq_len, d_model)
    raise ValueError(f"unknown layer {layer!r}; allowed: 'self-attention', 'recurrent'")


def layer_flop_crossover(d_model: int, largest: int = 2**20) -> int | None:
    """The least n at which the self-attention layer's matmul FLOPs reach the recurrent layer's, computed
    from the FLOP model (their ratio grows with n: bisection over whole n), or None up to ``largest``."""
    def reached(n: int) -> bool:
        return (layer_flops("self-attention", n, d_model).forward.matmul_total
                >= layer_flops("recurrent", n, d_model).forward.matmul_total)
    high = 1  # doubling first: the crossover lies near d, far below ``largest``, so few evaluations find it
    while high < largest and not reached(high):
        high *= 2
    if high >= largest and not reached(largest):
        return None
    high = min(high, largest)
    low = high // 2  # not reached at low (or low == 0), reached at high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reached(mid) else (mid, high)
    return high


def layer_case(layer: str, seq_len: int, d_model: int, device: str) -> Prepared:
    """Table 1: a self-attention layer (8 heads, fused SDPA, with projections; 8nd² + 4n²d FLOPs) against
    a recurrent layer (a GRU; 12nd²) on LAYER_BATCH sequences of n tokens. Their FLOPs cross at n = d."""
    dev = _device(device)
    x = torch.randn(LAYER_BATCH, seq_len, d_model, device=dev)
    f = layer_flops(layer, seq_len, d_model, dev)
    m = (MultiHeadAttention(d_model, LAYER_HEADS, strategy="sdpa", device=dev) if layer == "self-attention"
         else RecurrentLayer(d_model, device=dev))
    return Prepared(_synchronized(torch.no_grad()(lambda: m(x)), dev), f, tokens=LAYER_BATCH * seq_len,
                    device=dev.type)




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
