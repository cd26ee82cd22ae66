"""An exact analytic FLOP model of every module in this package, and a counter to check it against.

Conventions (the field's: FlashAttention, TorchBench, Kaplan et al. 2020): a multiply-add is 2 FLOPs; a matmul (m x k)(k x n) is
2*m*n*k. Every function returns a ``Flops`` with a ``forward`` and a ``backward`` ``Breakdown``, each
keeping matmul FLOPs (per component: projections, scores, weights*V, FFN, GRU gates, ...) apart from
the elementwise rest (softmax, masking, LayerNorm, residuals, biases, ...).

Matmul FLOPs are exact: they are what ``count`` measures with torch.utils.flop_counter.FlopCounterMode,
for every module and strategy, forward and backward, and the tests hold them equal. The backward of a
matmul C = A B costs one matmul per operand that needs a gradient (parameters always do; a module's
raw inputs only if they require grad, hence ``inputs_require_grad``). The fused SDPA kernels recompute
the scores in their backward, so their backward counts 5 attention matmuls where the written-out
equation's autograd counts 4.

Elementwise FLOPs have no counter to check them: torch's counter sees only matmuls, convolutions and
the SDPA kernels (softmax, LayerNorm and all elementwise work count 0 there). They follow the
per-element costs in ``ELEMENTWISE`` (a transcendental counts 1), a convention stated once here.
Dropout and embedding lookups are memory operations and count 0.

Where torch's counter sees less than the model without this module: it has no formula for the CPU
fused attention kernel (``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward), so it
counts 0 for them; ``count`` registers the GPU kernels' formulas for them. The eval-mode fast paths of
torch's own nn.MultiheadAttention and nn.TransformerEncoderLayer (``_native_multi_head_attention``,
``_transformer_encoder_layer_fwd``) still count 0: count torch's modules in train mode. On a GPU,
nn.GRU runs as one cuDNN op that the counter does not see (0 FLOPs); on the CPU it decomposes into
the matmuls counted here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils import flop_counter as fc
from torch.utils.flop_counter import FlopCounterMode

from ._validation import check_choice, check_heads, check_positive, check_positives
from .attention import BACKENDS
from .model import TransformerConfig
from .multihead import STRATEGIES
from .rnn_attention import RNNAttentionConfig

#: FLOPs per element (forward, backward) of the elementwise operations: a convention, not a measurement.
ELEMENTWISE: dict[str, tuple[int, int]] = {
    "bias": (1, 1),  # add; its gradient is a sum over rows
    "scale": (1, 1),  # multiply by a constant (1/sqrt(d_k), sqrt(d_model))
    "mask": (1, 1),  # one select or add per score
    "softmax": (5, 4),  # max, subtract, exp, sum, divide; backward y * (g - sum(g * y))
    "relu": (1, 1),
    "gelu": (8, 8),
    "tanh": (1, 2),
    "residual": (1, 0),  # add; the gradient passes through
    "positional": (1, 0),  # add the positional encoding
    "layernorm": (8, 10),  # mean, subtract, square, mean, rsqrt, multiply, scale, shift
    "gru_cell": (10, 16),  # per hidden unit and step: 3 gate sums, 2 sigmoids, tanh, reset product, blend
    "maxout": (1, 1),  # one comparison per pair
}


@dataclass(frozen=True)
class Breakdown:
    """FLOPs of one pass, per component: ``matmul`` (exact, counted) and ``other`` (elementwise convention)."""

    matmul: Mapping[str, int] = field(default_factory=dict)
    other: Mapping[str, int] = field(default_factory=dict)

    @property
    def matmul_total(self) -> int:
        return sum(self.matmul.values())

    @property
    def other_total(self) -> int:
        return sum(self.other.values())

    @property
    def total(self) -> int:
        return self.matmul_total + self.other_total

    def __add__(self, other: Breakdown) -> Breakdown:
        return Breakdown(dict(Counter(self.matmul) + Counter(other.matmul)), dict(Counter(self.other) + Counter(other.other)))

    def grouped(self, depth: int) -> Breakdown:
        """Components summed by the first ``depth`` parts of their dotted names."""
        def group(d):
            out = Counter()
            for name, v in d.items():
                out[".".join(name.split(".")[:depth])] += v
            return dict(out)
        return Breakdown(group(self.matmul), group(self.other))


@dataclass(frozen=True)
class Flops:
    """Analytic FLOPs of one call: forward and backward breakdowns."""

    forward: Breakdown
    backward: Breakdown

    @property
    def train(self) -> Breakdown:
        """Forward plus backward: one training step's work."""
        return self.forward + self.backward

    def __add__(self, other: Flops) -> Flops:
        return Flops(self.forward + other.forward, self.backward + other.backward)

    def rows(self) -> list[dict]:
        """One dict per (pass, kind, component), ready for a pandas DataFrame."""
        return [
            {"pass": p, "kind": kind, "component": name, "flops": v}
            for p, b in (("forward", self.forward), ("backward", self.backward))
            for kind, d in (("matmul", b.matmul), ("other", b.other))
            for name, v in sorted(d.items())
        ]


class _Tally:
    """Accumulates FLOPs component by component while a model's structure is walked."""

    def __init__(self):
        self.fwd_mm, self.bwd_mm, self.fwd_other, self.bwd_other = Counter(), Counter(), Counter(), Counter()
        self.prefix = ""
        self.recompute = False  # whether fused attention kernels recompute the scores in their backward

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        outer = self.prefix
        self.prefix = f"{outer}{name}."
        try:
            yield
        finally:
            self.prefix = outer

    def matmul(self, name: str, m: int, n: int, k: int, batch: int = 1, grad_a: bool = True, grad_b: bool = True) -> None:
        """(m x k)(k x n), ``batch`` times; its backward needs one matmul per operand that needs a gradient."""
        f = 2 * batch * m * n * k
        self.fwd_mm[self.prefix + name] += f
        self.bwd_mm[self.prefix + name] += f * (int(grad_a) + int(grad_b))

    def linear(self, name: str, rows: int, d_in: int, d_out: int, bias: bool = True, input_grad: bool = True) -> None:
        """y = x W^T + b over ``rows`` rows; W always needs its gradient."""
        self.matmul(name, rows, d_out, d_in, grad_a=input_grad)
        if bias:
            self.elementwise(name, "bias", rows * d_out)

    def elementwise(self, name: str, op: str, numel: int, grad: bool = True) -> None:
        f, b = ELEMENTWISE[op]
        self.fwd_other[self.prefix + name] += f * numel
        if grad:
            self.bwd_other[self.prefix + name] += b * numel

    def flops(self) -> Flops:
        def clean(c):
            return {k: v for k, v in c.items() if v}
        return Flops(Breakdown(clean(self.fwd_mm), clean(self.fwd_other)), Breakdown(clean(self.bwd_mm), clean(self.bwd_other)))


# -- attention ------------------------------------------------------------------------------------

def attention(batch: int, n_q: int, n_k: int, d_k: int, d_v: int | None = None, *, backend: str = "math",
              masked: bool = False, causal: bool = False, inputs_require_grad: bool = False,
              dropout_p: float = 0.0, device="cpu", dtype=torch.float32) -> Flops:
    """Equation (1) over ``batch`` independent (batch x head) slices of 4-D inputs: scores, mask,
    softmax, weights*V. ``device``, ``dtype`` and ``dropout_p`` only decide, for backend 'sdpa',
    whether torch runs a fused kernel (see ``sdpa_recomputes``)."""
    d_v = d_k if d_v is None else d_v
    check_positives(batch=batch, n_q=n_q, n_k=n_k, d_k=d_k, d_v=d_v)
    t = _Tally()
    recompute = backend == "sdpa" and sdpa_recomputes(d_k, d_v, masked=masked, causal=causal, dropout_p=dropout_p,
                                                      device=device, dtype=dtype)
    _attention(t, batch, n_q, n_k, d_k, d_v, backend, masked or causal, inputs_require_grad, recompute)
    return t.flops()


def sdpa_recomputes(d_k: int, d_v: int | None = None, *, masked: bool = False, causal: bool = False,
                    dropout_p: float = 0.0, device="cpu", dtype=torch.float32) -> bool:
    """Whether torch.nn.functional.scaled_dot_product_attention picks a fused kernel (whose backward
    recomputes Q K^T: 5 attention matmuls) rather than its math fallback (4), as this torch build
    decides for 4-D inputs with these settings. On the CPU the fused kernel needs d_k == d_v and no
    dropout."""
    d_v = d_k if d_v is None else d_v
    check_positive("d_k", d_k)
    check_positive("d_v", d_v)
    q, v = torch.zeros(1, 1, 1, d_k, device=device, dtype=dtype), torch.zeros(1, 1, 1, d_v, device=device, dtype=dtype)
    mask = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device) if masked else None
    if mask is not None and causal:
        causal = False  # scaled_dot_product_attention (ours) merges the two into one mask
    return torch._fused_sdp_choice(q, q, v, mask, dropout_p, causal) != 0  # 0 is SDPBackend.MATH


def _attention(t: _Tally, batch, n_q, n_k, d_k, d_v, backend, masked, grad, recompute) -> None:
    check_choice("attention backend", backend, BACKENDS)
    for name, v in (("batch", batch), ("n_q", n_q), ("n_k", n_k), ("d_k", d_k), ("d_v", d_v)):
        check_positive(name, v)
    scores = batch * n_q * n_k
    t.elementwise("scale", "scale", batch * n_q * d_k, grad)
    t.matmul("scores", n_q, n_k, d_k, batch, grad, grad)
    if masked:
        t.elementwise("mask", "mask", scores, grad)
    t.elementwise("softmax", "softmax", scores, grad)
    t.matmul("weights_v", n_q, d_v, n_k, batch, grad, grad)
    if recompute and grad:  # the fused backward recomputes Q K^T before the 4 gradient matmuls
        t.bwd_mm[t.prefix + "scores"] += 2 * batch * n_q * n_k * d_k


def causal_pairs(n_q: int, n_k: int) -> int:
    """Query-key pairs a causal mask keeps (top-left aligned): the useful share of the n_q*n_k scores."""
    check_positives(n_q=n_q, n_k=n_k)
    return sum(min(i + 1, n_k) for i in range(n_q))


def useful_attention_flops(batch: int, n_q: int, n_k: int, d_head: int, causal: bool = False) -> int:
    """FlashAttention's convention for throughput: 4 * pairs * d_head per slice, masked pairs not counted."""
    check_positives(batch=batch, n_q=n_q, n_k=n_k, d_head=d_head)
    pairs = causal_pairs(n_q, n_k) if causal else n_q * n_k
    return 4 * batch * pairs * d_head


def multi_head_attention(batch: int, n_q: int, d_model: int, num_heads: int, n_k: int | None = None, *,
                         strategy: str = "batched", out_proj: bool = True, bias: bool = True, masked: bool = False,
                         causal: bool = False, inputs_require_grad: bool = False, dropout_p: float = 0.0,
                         device="cpu", dtype=torch.float32) -> Flops:
    """MultiHeadAttention of section 3.2.2; self-attention when n_k is None. Matmul FLOPs do not depend on h.
    ``device``, ``dtype`` and ``dropout_p`` matter only through ``sdpa_recomputes`` (strategy 'sdpa')."""
    check_positives(batch=batch, n_q=n_q, **({} if n_k is None else {"n_k": n_k}))
    check_choice("strategy", strategy, STRATEGIES)
    d_head = check_heads(d_model, num_heads)
    recompute = strategy == "sdpa" and sdpa_recomputes(d_head, masked=masked, causal=causal, dropout_p=dropout_p,
                                                       device=device, dtype=dtype)
    t = _Tally()
    _mha(t, batch, n_q, n_q if n_k is None else n_k, d_model, num_heads, strategy, out_proj, bias,
         masked or causal, inputs_require_grad, recompute)
    return t.flops()


def _mha(t, batch, n_q, n_k, d_model, h, strategy, out_proj, bias, masked, input_grad, recompute,
         project_kv: bool = True) -> None:
    check_choice("strategy", strategy, STRATEGIES)
    d_head = check_heads(d_model, h)
    t.linear("q_proj", batch * n_q, d_model, d_model, bias, input_grad)
    if project_kv:
        t.linear("k_proj", batch * n_k, d_model, d_model, bias, input_grad)
        t.linear("v_proj", batch * n_k, d_model, d_model, bias, input_grad)
    backend = "sdpa" if strategy == "sdpa" else "math"
    _attention(t, batch * h, n_q, n_k, d_head, d_head, backend, masked, True, recompute)
    if out_proj:
        t.linear("out_proj", batch * n_q, d_model, d_model, bias, True)


# -- the Transformer -------------------------------------------------------------------------------

def transformer(config: TransformerConfig, batch: int, n_src: int, n_tgt: int, *,
                src_padding: bool = False, tgt_padding: bool = False, device="cpu", dtype=torch.float32) -> Flops:
    """Teacher-forced ``Transformer.forward`` in train mode (logits for every target position) and its
    backward. ``device`` and ``dtype`` matter only through ``sdpa_recomputes`` (strategy 'sdpa')."""
    check_positives(batch=batch, n_src=n_src, n_tgt=n_tgt)
    t = _Tally()
    t.recompute = config.strategy == "sdpa" and sdpa_recomputes(config.d_head, masked=True, dropout_p=config.dropout,
                                                                device=device, dtype=dtype)
    _embed(t, "src_embed", config, batch * n_src)
    _encoder(t, config, batch, n_src, src_padding)
    _embed(t, "tgt_embed", config, batch * n_tgt)
    _decoder(t, config, batch, n_tgt, n_tgt, n_src, src_padding, tgt_padding, causal=True)
    t.linear("generator", batch * n_tgt, config.d_model, config.tgt_vocab, bias=False)
    return t.flops()


def transformer_generate(config: TransformerConfig, batch: int, n_src: int, steps: int, *, use_cache: bool = True) -> Flops:
    """Greedy ``Transformer.generate`` for ``steps`` new tokens (no early stop); forward only."""
    check_positives(batch=batch, n_src=n_src, steps=steps)
    t = _Tally()
    _embed(t, "src_embed", config, batch * n_src)
    _encoder(t, config, batch, n_src, False)
    with t.scope("decoder"):
        if use_cache:  # cross-attention K and V of the encoder output, once per layer
            for _ in range(config.num_decoder_layers):
                t.linear("cross_attn.k_proj", batch * n_src, config.d_model, config.d_model)
                t.linear("cross_attn.v_proj", batch * n_src, config.d_model, config.d_model)
    for step in range(steps):
        n_q = 1 if use_cache else step + 1
        _embed(t, "tgt_embed", config, batch * n_q)
        _decoder(t, config, batch, n_q, step + 1, n_src, False, False, causal=not use_cache, project_memory=not use_cache)
        t.linear("generator", batch, config.d_model, config.tgt_vocab, bias=False)
    f = t.flops()
    return Flops(f.forward, Breakdown())


def _embed(t: _Tally, name: str, c: TransformerConfig, rows: int) -> None:
    t.elementwise(name, "scale", rows * c.d_model)
    t.elementwise(name, "positional", rows * c.d_model)


def _add_norm(t: _Tally, c: TransformerConfig, rows: int) -> None:
    t.elementwise("residual", "residual", rows * c.d_model)
    t.elementwise("layernorm", "layernorm", rows * c.d_model)


def _ffn(t: _Tally, c: TransformerConfig, rows: int) -> None:
    with t.scope("ffn"):
        t.linear("linear1", rows, c.d_model, c.d_ff)
        t.elementwise(c.activation, c.activation, rows * c.d_ff)
        t.linear("linear2", rows, c.d_ff, c.d_model)


def _encoder(t: _Tally, c: TransformerConfig, batch: int, n: int, padding: bool) -> None:
    rows = batch * n
    with t.scope("encoder"):
        for _ in range(c.num_encoder_layers):
            with t.scope("self_attn"):
                _mha(t, batch, n, n, c.d_model, c.num_heads, c.strategy, True, True, padding, True, t.recompute)
            _add_norm(t, c, rows)
            _ffn(t, c, rows)
            _add_norm(t, c, rows)
        t.elementwise("final_norm", "layernorm", rows * c.d_model)


def _decoder(t, c, batch, n_q, n_k_self, n_src, src_padding, tgt_padding, causal, project_memory=True) -> None:
    """Decoder stack over n_q new positions whose self-attention sees n_k_self positions."""
    rows = batch * n_q
    with t.scope("decoder"):
        for _ in range(c.num_decoder_layers):
            with t.scope("self_attn"):
                if n_q == n_k_self:
                    _mha(t, batch, n_q, n_q, c.d_model, c.num_heads, c.strategy, True, True, causal or tgt_padding, True,
                         t.recompute)
                else:  # cached step: only the new position's K and V are projected
                    _mha(t, batch, n_q, n_k_self, c.d_model, c.num_heads, c.strategy, True, True, False, True, t.recompute,
                         project_kv=False)
                    t.linear("k_proj", rows, c.d_model, c.d_model)
                    t.linear("v_proj", rows, c.d_model, c.d_model)
            _add_norm(t, c, rows)
            with t.scope("cross_attn"):
                _mha(t, batch, n_q, n_src, c.d_model, c.num_heads, c.strategy, True, True, src_padding, True,
                     t.recompute, project_kv=project_memory)
            _add_norm(t, c, rows)
            _ffn(t, c, rows)
            _add_norm(t, c, rows)
        t.elementwise("final_norm", "layernorm", rows * c.d_model)


# -- the RNN baseline ------------------------------------------------------------------------------

def rnn_attention(config: RNNAttentionConfig, batch: int, n_src: int, n_tgt: int) -> Flops:
    """Teacher-forced ``RNNAttention.forward`` and its backward, for unpadded batches (with a padding
    mask the encoder skips the padded steps, so its GRU does less than this)."""
    check_positives(batch=batch, n_src=n_src, n_tgt=n_tgt)
    t = _Tally()
    _rnn_encode(t, config, batch, n_src)
    for _ in range(n_tgt):
        _rnn_step(t, config, batch, n_src)
    _rnn_output(t, config, batch * n_tgt)
    return t.flops()


def rnn_attention_generate(config: RNNAttentionConfig, batch: int, n_src: int, steps: int) -> Flops:
    """Greedy ``RNNAttention.generate`` for ``steps`` new tokens (no early stop); forward only."""
    check_positives(batch=batch, n_src=n_src, steps=steps)
    t = _Tally()
    _rnn_encode(t, config, batch, n_src)
    for _ in range(steps):
        _rnn_step(t, config, batch, n_src)
        _rnn_output(t, config, batch)
    return Flops(t.flops().forward, Breakdown())


def recurrent_layer(batch: int, n: int, d_model: int) -> Flops:
    """Table 1's recurrent layer (RecurrentLayer): a GRU of width d_model over n steps, 12·n·d² matmul FLOPs
    per sequence, against self-attention's 8·n·d² + 4·n²·d; the two are equal at n = d."""
    check_positives(batch=batch, n=n, d_model=d_model)
    t = _Tally()
    _gru(t, "recurrent_layer", batch, d_model, d_model, n, h0_grad=False)
    return t.flops()


def _gru(t: _Tally, name: str, batch: int, d_in: int, hidden: int, steps: int, h0_grad: bool) -> None:
    """``steps`` GRU steps: gates from W_ih x (+ b_ih) and W_hh h (+ b_hh), then the cell's elementwise work."""
    with t.scope(name):
        for step in range(steps):
            t.linear("gates_input", batch, d_in, 3 * hidden)
            t.linear("gates_hidden", batch, hidden, 3 * hidden, input_grad=h0_grad or step > 0)
            t.elementwise("cell", "gru_cell", batch * hidden)


def _rnn_encode(t: _Tally, c: RNNAttentionConfig, batch: int, n_src: int) -> None:
    with t.scope("encoder"):
        for direction in ("forward", "backward"):
            _gru(t, f"bigru_{direction}", batch, c.emb_dim, c.enc_hidden, n_src, h0_grad=False)
    with t.scope("decoder"):
        t.linear("init_state", batch, c.enc_hidden, c.dec_hidden)
        t.elementwise("init_state", "tanh", batch * c.dec_hidden)
        t.linear("attention.keys", batch * n_src, 2 * c.enc_hidden, c.align_dim)


def _rnn_step(t: _Tally, c: RNNAttentionConfig, batch: int, n_src: int) -> None:
    """One decoder step: additive attention over all n_src annotations, then one GRU step."""
    scores = batch * n_src
    with t.scope("decoder"), t.scope("attention"):
        t.linear("query", batch, c.dec_hidden, c.align_dim, bias=False)
        t.elementwise("energy", "residual", scores * c.align_dim)
        t.elementwise("energy", "tanh", scores * c.align_dim)
        t.linear("v_a", scores, c.align_dim, 1, bias=False)
        t.elementwise("softmax", "softmax", scores)
        t.matmul("context", 1, 2 * c.enc_hidden, n_src, batch)
    with t.scope("decoder"):
        _gru(t, "gru", batch, c.emb_dim + 2 * c.enc_hidden, c.dec_hidden, 1, h0_grad=True)


def _rnn_output(t: _Tally, c: RNNAttentionConfig, rows: int) -> None:
    with t.scope("decoder"):
        t.linear("readout", rows, c.dec_hidden + 2 * c.enc_hidden + c.emb_dim, 2 * c.maxout_units)
        t.elementwise("readout", "maxout", rows * c.maxout_units)
    t.linear("generator", rows, c.maxout_units, c.tgt_vocab)


# -- measuring the same with torch's counter -------------------------------------------------------

@dataclass(frozen=True)
class Counted:
    """Matmul FLOPs measured by FlopCounterMode; ``backward`` is None when it was not run."""

    forward: int
    backward: int | None
    forward_by_op: Mapping[str, int]
    backward_by_op: Mapping[str, int] | None

    @property
    def train(self) -> int:
        if self.backward is None:
            raise ValueError("the backward pass was not counted: call count(..., backward=True)")
        return self.forward + self.backward


def count(fn: Callable, *args, backward: bool = False, **kwargs) -> Counted:
    """Run ``fn(*args, **kwargs)`` (a module or any callable) under FlopCounterMode; with ``backward``
    also backpropagate the sum of its first floating output and count that separately."""
    register_cpu_sdpa_formulas()
    with FlopCounterMode(display=False) as fwd:
        out = fn(*args, **kwargs)
    bwd = None
    if backward:
        tensor = next(x for x in (out if isinstance(out, (tuple, list)) else (out,)) if torch.is_tensor(x) and x.is_floating_point())
        loss = tensor.float().sum()
        with FlopCounterMode(display=False) as bwd:
            loss.backward()
    return Counted(
        fwd.get_total_flops(),
        None if bwd is None else bwd.get_total_flops(),
        _by_op(fwd),
        None if bwd is None else _by_op(bwd),
    )


def _by_op(mode: FlopCounterMode) -> dict[str, int]:
    return {str(op): v for op, v in mode.get_flop_counts().get("Global", {}).items()}


_REGISTERED = False


def register_cpu_sdpa_formulas() -> None:
    """Teach the counter the CPU fused attention kernel, with the same formulas as the GPU kernels."""
    global _REGISTERED
    if _REGISTERED:
        return
    aten = torch.ops.aten
    for op, formula in (
        (aten._scaled_dot_product_flash_attention_for_cpu, fc.sdpa_flop_count),
        (aten._scaled_dot_product_flash_attention_for_cpu_backward, fc.sdpa_backward_flop_count),
    ):
        if op not in fc.flop_registry:  # a later torch may know it already

            def shapes_only(*shapes, out_shape=None, _f=formula, **kwargs):
                n = 4 if _f is fc.sdpa_backward_flop_count else 3
                return _f(*shapes[:n])

            fc.register_flop_formula(op)(shapes_only)
    _REGISTERED = True
