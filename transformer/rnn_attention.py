"""The RNN-attention baseline the Transformer replaced: RNNsearch (Bahdanau, Cho and Bengio, 2015).

A bidirectional GRU reads the source into annotations h_j = [forward h_j; backward h_j]. The decoder
is a GRU whose state s_i depends on s_(i-1); at every step it recomputes the additive attention
    e_ij = v_a^T tanh(W_a s_(i-1) + U_a h_j),   alpha_ij = softmax_j(e_ij),   c_i = sum_j alpha_ij h_j
over all source positions (U_a h_j is computed once per sentence and reused), then
s_i = GRU(s_(i-1), [y_(i-1); c_i]) and the output is a maxout readout of (s_i, c_i, y_(i-1))
(Bahdanau et al. appendix A). The decoder is sequential by construction, even under teacher forcing:
that is claim C1's point. Its interface matches ``Transformer`` (tokens in, logits out, greedy
``generate``) so that both run on the same inputs.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.overrides import TorchFunctionMode
from torch.profiler import record_function

from ._validation import check_choice, check_positive, check_tokens
from .decoding import greedy_decode
from .model import Transformer, TransformerConfig

MATCHES = ("width", "params")


@dataclass(frozen=True)
class RNNAttentionConfig:
    """Sizes of RNNsearch; the defaults are the paper's RNNsearch-50 (1000 units, 620-dim embeddings)."""

    src_vocab: int = 30000
    tgt_vocab: int = 30000
    emb_dim: int = 620
    enc_hidden: int = 1000
    dec_hidden: int = 1000
    align_dim: int = 1000
    maxout_units: int = 500

    def __post_init__(self):
        for f in dataclasses.fields(self):
            check_positive(f.name, getattr(self, f.name))

    @classmethod
    def preset(cls, name: str, **overrides) -> RNNAttentionConfig:
        check_choice("preset", name, RNN_PRESETS)
        return dataclasses.replace(RNN_PRESETS[name], **overrides)

    @classmethod
    def matching(cls, config: TransformerConfig, match: str = "width") -> RNNAttentionConfig:
        """A baseline for a Transformer config, on the same vocabularies.

        ``"width"``: every hidden width equals d_model (embeddings, each GRU direction, decoder,
        alignment), maxout d_model/2. ``"params"``: embeddings of width d_model and the hidden width
        chosen so that the parameter count is as close as possible to the Transformer's.
        """
        check_choice("match", match, MATCHES)
        base = dict(src_vocab=config.src_vocab, tgt_vocab=config.tgt_vocab, emb_dim=config.d_model)
        if match == "width":
            return cls._with_hidden(base, config.d_model)
        return cls._with_hidden(base, _params_matching_width(config))

    @classmethod
    def _with_hidden(cls, base: dict, hidden: int) -> RNNAttentionConfig:
        return cls(**base, enc_hidden=hidden, dec_hidden=hidden, align_dim=hidden, maxout_units=max(1, hidden // 2))


@functools.cache
def _params_matching_width(config: TransformerConfig) -> int:
    """The hidden width whose RNNAttention's parameter count is nearest the Transformer's (bisection; the
    models are built on the meta device, their initialisers skipped: ``_on_meta``)."""
    base = dict(src_vocab=config.src_vocab, tgt_vocab=config.tgt_vocab, emb_dim=config.d_model)
    with _on_meta():
        target = parameter_count(Transformer(config, device="meta"))
        count = lambda h: parameter_count(RNNAttention(RNNAttentionConfig._with_hidden(base, h), device="meta"))  # noqa: E731
        lo, hi = 2, 2
        while count(hi) < target:
            lo, hi = hi, hi * 2
        while hi - lo > 1:  # parameter count grows with the width: bisect
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if count(mid) < target else (lo, mid)
        return min((lo, hi), key=lambda h: abs(count(h) - target))


class _on_meta(TorchFunctionMode):
    """Initialisers do nothing to meta tensors: they hold no values to initialise, and torch runs ``normal_`` on
    one through a meta kernel whose first use imports torch._dynamo (1-2 s in each fresh process)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensor = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes it by name
        initialiser = getattr(func, "__module__", None) == "torch.nn.init" or func in _IN_PLACE_RANDOM
        if initialiser and getattr(tensor, "is_meta", False):
            return tensor
        return func(*args, **kwargs)


_IN_PLACE_RANDOM = {torch.Tensor.normal_, torch.Tensor.uniform_}


RNN_PRESETS: dict[str, RNNAttentionConfig] = {
    "rnnsearch": RNNAttentionConfig(),
    "tiny": RNNAttentionConfig(src_vocab=64, tgt_vocab=64, emb_dim=32, enc_hidden=32, dec_hidden=32,
                               align_dim=32, maxout_units=16),
}


def parameter_count(module: nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in module.parameters())


class AdditiveAttention(nn.Module):
    """Bahdanau's alignment model: e_ij = v_a^T tanh(W_a s_(i-1) + U_a h_j), softmax over j (section 3.1)."""

    def __init__(self, query_dim: int, key_dim: int, align_dim: int, device=None, dtype=None):
        super().__init__()
        f = {"device": device, "dtype": dtype}
        self.W_a = nn.Linear(query_dim, align_dim, bias=False, **f)
        self.U_a = nn.Linear(key_dim, align_dim, **f)
        self.v_a = nn.Linear(align_dim, 1, bias=False, **f)

    def precompute(self, annotations: torch.Tensor) -> torch.Tensor:
        """U_a h_j for every source position, once per sentence: (batch, n_src, align_dim)."""
        with record_function("additive_attention.keys"):
            return self.U_a(annotations)

    def forward(self, s_prev, keys, annotations, mask=None):
        """Context c_i (batch, key_dim) and weights alpha_i (batch, n_src) for decoder state s_(i-1)."""
        with record_function("additive_attention"):
            e = self.v_a(torch.tanh(self.W_a(s_prev)[:, None, :] + keys)).squeeze(-1)
            if mask is not None:
                e = e.masked_fill(~mask, float("-inf"))
            alpha = torch.softmax(e, dim=-1)
            context = torch.bmm(alpha[:, None, :], annotations).squeeze(1)
        return context, alpha


class RecurrentLayer(nn.Module):
    """Table 1's recurrent layer: one GRU of width d_model over the sequence, O(n·d²), n sequential steps."""

    def __init__(self, d_model: int, device=None, dtype=None):
        super().__init__()
        check_positive("d_model", d_model)
        self.gru = nn.GRU(d_model, d_model, batch_first=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, n, d_model) -> (batch, n, d_model)."""
        with record_function("recurrent_layer.gru"):
            return self.gru(x)[0]


class RNNAttention(nn.Module):
    """RNNsearch: bidirectional GRU encoder, GRU decoder with additive attention recomputed every step."""

    def __init__(self, config: RNNAttentionConfig, device=None, dtype=None):
        super().__init__()
        self.config = c = config
        f = {"device": device, "dtype": dtype}
        self.src_embed = nn.Embedding(c.src_vocab, c.emb_dim, **f)
        self.tgt_embed = nn.Embedding(c.tgt_vocab, c.emb_dim, **f)
        self.encoder = nn.GRU(c.emb_dim, c.enc_hidden, batch_first=True, bidirectional=True, **f)
        self.init_state = nn.Linear(c.enc_hidden, c.dec_hidden, **f)  # s_0 = tanh(W_s backward h_1)
        self.attention = AdditiveAttention(c.dec_hidden, 2 * c.enc_hidden, c.align_dim, **f)
        self.cell = nn.GRUCell(c.emb_dim + 2 * c.enc_hidden, c.dec_hidden, **f)
        self.readout = nn.Linear(c.dec_hidden + 2 * c.enc_hidden + c.emb_dim, 2 * c.maxout_units, **f)
        self.generator = nn.Linear(c.maxout_units, c.tgt_vocab, **f)

    @classmethod
    def from_preset(cls, name: str, device=None, dtype=None, **overrides) -> RNNAttention:
        return cls(RNNAttentionConfig.preset(name, **overrides), device=device, dtype=dtype)

    def encode(self, src: torch.Tensor, src_key_padding_mask=None) -> torch.Tensor:
        """Annotations h_j (batch, n_src, 2 * enc_hidden) from the bidirectional GRU.

        With a padding mask (True = padding, at the end of each row), the backward GRU starts at
        each sentence's own last token.
        """
        check_tokens("src", src, self.config.src_vocab)
        with record_function("embedding"):
            x = self.src_embed(src)
        with record_function("encoder.bigru"):
            if src_key_padding_mask is None:
                return self.encoder(x)[0]
            lengths = (~src_key_padding_mask).sum(1).cpu()
            if (lengths == 0).any():  # a GRU cannot run over nothing (and softmax over no key is NaN)
                row = int((lengths == 0).nonzero()[0])
                raise ValueError(f"src_key_padding_mask marks every position of row {row} as padding; "
                                 f"each source sentence needs at least one token")
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            return pad_packed_sequence(self.encoder(packed)[0], batch_first=True, total_length=src.shape[1])[0]

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None, return_attention=False):
        """Teacher-forced logits (batch, n_tgt, tgt_vocab): tgt[:, i] is y_(i-1), the input of step i.

        ``tgt_key_padding_mask`` is accepted for interface parity; padded target positions produce
        logits that a loss should ignore. With ``return_attention`` also the weights (batch, n_tgt, n_src).
        """
        check_tokens("tgt", tgt, self.config.tgt_vocab)
        annotations = self.encode(src, src_key_padding_mask)
        if tgt.shape[0] != annotations.shape[0]:
            raise ValueError(f"tgt has batch size {tgt.shape[0]} but src has {annotations.shape[0]}")
        step = self._stepper(annotations, src_key_padding_mask)
        with record_function("embedding"):
            y = self.tgt_embed(tgt)
        states, contexts, alphas = zip(*(step(y[:, i]) for i in range(tgt.shape[1])), strict=True)
        logits = self._output(torch.stack(states, 1), torch.stack(contexts, 1), y)
        return (logits, torch.stack(alphas, 1)) if return_attention else logits

    @torch.no_grad()
    def generate(self, src, max_new_tokens: int, bos_id: int, eos_id: int | None = None,
                 src_key_padding_mask=None) -> torch.Tensor:
        """Greedy decoding: (batch, 1 + steps) tokens starting with ``bos_id``, as Transformer.generate."""
        step = self._stepper(self.encode(src, src_key_padding_mask), src_key_padding_mask)

        def next_logits(ys, t):
            with record_function("embedding"):
                y = self.tgt_embed(ys[:, -1])
            s, c, _ = step(y)
            return self._output(s, c, y)

        return greedy_decode(next_logits, src.shape[0], max_new_tokens, bos_id, eos_id, self.config.tgt_vocab,
                             src.device)

    def _stepper(self, annotations, src_key_padding_mask):
        """A function y_(i-1) embedding -> (s_i, c_i, alpha_i) that carries the decoder state."""
        keys = self.attention.precompute(annotations)
        mask = None if src_key_padding_mask is None else ~src_key_padding_mask
        with record_function("decoder.init_state"):
            state = [torch.tanh(self.init_state(annotations[:, 0, self.config.enc_hidden:]))]

        def step(y_prev):
            context, alpha = self.attention(state[0], keys, annotations, mask)
            with record_function("gru_step"):
                state[0] = self.cell(torch.cat([y_prev, context], dim=-1), state[0])
            return state[0], context, alpha

        return step

    def _output(self, s, c, y_prev):
        """Deep output with maxout (appendix A.2.2): logits from s_i, c_i and y_(i-1)."""
        with record_function("readout"):
            t = self.readout(torch.cat([s, c, y_prev], dim=-1))
            t = t.unflatten(-1, (-1, 2)).amax(-1)
        with record_function("generator"):
            return self.generator(t)
