"""The building blocks of the encoder and decoder stacks: section 3.1 (layers, Add & Norm), 3.3 (FFN),
3.4 (embeddings) and 3.5 (sinusoidal positional encoding).

Each sub-layer is wrapped in a residual connection and a LayerNorm. The paper puts the norm after
the residual (post-LN: LayerNorm(x + Sublayer(x))); ``norm_first=True`` gives the pre-LN variant
x + Sublayer(LayerNorm(x)). Attribute names (self_attn, linear1, norm1, ...) follow
torch.nn.TransformerEncoderLayer / TransformerDecoderLayer so that weights load one to one.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from ._validation import check_bool, check_choice, check_positive, check_positive_float, check_probability
from .multihead import MultiHeadAttention

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def sinusoidal_positional_encoding(n: int, d_model: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)); shape
    (n, d_model)."""
    check_positive("d_model", d_model)
    pos = torch.arange(n, device=device, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, device=device, dtype=torch.float64)
    inv_freq = torch.exp(two_i * (-math.log(10000.0) / d_model))
    pe = torch.empty(n, d_model, device=device, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq[: d_model // 2])
    return pe.to(dtype)


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding of each position, then dropout (section 3.5)."""

    def __init__(self, d_model: int, dropout: float = 0.0, initial_len: int = 1024):
        super().__init__()
        self.d_model = check_positive("d_model", d_model)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.register_buffer("pe", sinusoidal_positional_encoding(initial_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: (batch, n, d_model); position ``offset`` (an int >= 0) is the first position of x."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a whole number >= 0 (the first position of x), got {offset!r}")
        end = offset + x.shape[1]
        if end > self.pe.shape[0]:  # grow the table in powers of two, computed once per size
            self.pe = sinusoidal_positional_encoding(1 << (end - 1).bit_length(), self.d_model, device=self.pe.device)
        with record_function("positional_encoding"):
            return self.dropout(x + self.pe[offset:end].to(x.dtype))


class Embeddings(nn.Module):
    """Learned token embeddings multiplied by sqrt(d_model) (section 3.4)."""

    def __init__(self, vocab: int, d_model: int, device=None, dtype=None):
        super().__init__()
        self.vocab, self.d_model = check_positive("vocab", vocab), d_model
        self.lut = nn.Embedding(vocab, d_model, device=device, dtype=dtype)
        nn.init.normal_(self.lut.weight, std=d_model ** -0.5)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        with record_function("embedding"):
            return self.lut(tokens) * self.scale


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position (section 3.3)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu", device=None,
                 dtype=None):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, device=device, dtype=dtype)
        self.linear2 = nn.Linear(d_ff, d_model, device=device, dtype=dtype)
        self.dropout = nn.Dropout(dropout)
        check_choice("activation", activation, ACTIVATIONS)
        # ReLU overwrites linear1's fresh output (its backward needs only its own output): one d_ff-wide
        # temporary fewer per call, which on a CPU is a large allocation and its page faults saved
        self.activation = partial(F.relu, inplace=True) if activation == "relu" else ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function("ffn"):
            return self.linear2(self.dropout(self.activation(self.linear1(x))))


def _residual(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """x + Sublayer(x). Without autograd the sum is written into the sub-layer's output, a temporary
    of this call, saving one allocation; with it, a new tensor (autograd may need ``out`` as it is)."""
    if torch.is_grad_enabled() and (x.requires_grad or out.requires_grad):
        return x + out
    return out.add_(x)


class _Layer(nn.Module):
    """What encoder and decoder layers share (section 3.1): attention sub-layers, the FFN, and an
    Add & Norm (norm1, norm2, ... with dropout1, dropout2, ...) around each sub-layer."""

    def __init__(self, attentions: tuple[str, ...], d_model, num_heads, d_ff, dropout=0.0, *, norm_first=False,
                 strategy="sdpa", activation="relu", layer_norm_eps=1e-5, device=None, dtype=None):
        super().__init__()
        f = {"device": device, "dtype": dtype}
        check_positive("d_ff", d_ff)
        check_probability("dropout", dropout)
        check_positive_float("layer_norm_eps", layer_norm_eps)
        self.norm_first = check_bool("norm_first", norm_first)
        for name in attentions:
            setattr(self, name, MultiHeadAttention(d_model, num_heads, strategy=strategy, dropout=dropout, **f))
        self.ffn = FeedForward(d_model, d_ff, dropout, activation, **f)
        for i in range(1, len(attentions) + 2):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model, eps=layer_norm_eps, **f))
            setattr(self, f"dropout{i}", nn.Dropout(dropout))

    def _sublayer(self, x, fn, norm: nn.LayerNorm, dropout: nn.Dropout) -> torch.Tensor:
        if self.norm_first:
            out = fn(norm(x))
            with record_function("add_norm"):
                return _residual(x, dropout(out))
        out = fn(x)
        with record_function("add_norm"):
            return norm(_residual(x, dropout(out)))

    def _load_ffn_and_norms(self, layer: nn.Module, n_norms: int) -> None:
        self.ffn.linear1.load_state_dict(layer.linear1.state_dict())
        self.ffn.linear2.load_state_dict(layer.linear2.state_dict())
        for i in range(1, n_norms + 1):
            getattr(self, f"norm{i}").load_state_dict(getattr(layer, f"norm{i}").state_dict())


def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    ours.load_state_dict(MultiHeadAttention.from_torch(theirs, ours.strategy).state_dict())


class EncoderLayer(_Layer):
    """Encoder layer: self-attention, Add & Norm, FFN, Add & Norm (section 3.1, figure 1 left)."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, **options):
        super().__init__(("self_attn",), d_model, num_heads, d_ff, dropout, **options)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        def self_attn(z):
            with record_function("encoder.self_attn"):
                return self.self_attn(z, key_padding_mask=key_padding_mask)

        x = self._sublayer(x, self_attn, self.norm1, self.dropout1)
        return self._sublayer(x, self.ffn, self.norm2, self.dropout2)

    def load_torch(self, layer: nn.TransformerEncoderLayer) -> None:
        _copy_attention(self.self_attn, layer.self_attn)
        self._load_ffn_and_norms(layer, 2)


class DecoderLayer(_Layer):
    """Decoder layer: causal self-attention, cross-attention over the encoder output (its K and V),
    FFN, each with Add & Norm (section 3.1, figure 1 right)."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, **options):
        super().__init__(("self_attn", "cross_attn"), d_model, num_heads, d_ff, dropout, **options)

    def forward(self, y, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None) -> torch.Tensor:
        """y: decoder input (batch, n_tgt, d); memory: encoder output (batch, n_src, d)."""

        def self_attn(z):
            with record_function("decoder.self_attn"):
                return self.self_attn(z, key_padding_mask=tgt_key_padding_mask, causal=True)

        def cross_attn(z):
            with record_function("decoder.cross_attn"):
                return self.cross_attn(z, memory, key_padding_mask=memory_key_padding_mask)

        return self._feed(y, self_attn, cross_attn)

    def step(self, y, memory_kv, cache: dict, memory_mask=None) -> torch.Tensor:
        """One new position y (batch, 1, d) with cached keys/values of the earlier ones.

        ``memory_kv`` is the cross-attention's (K, V) of the encoder output, projected once;
        ``cache`` holds this layer's self-attention K and V and is extended in place.
        """
        sa, ca = self.self_attn, self.cross_attn

        def self_attn(z):
            with record_function("decoder.self_attn"):
                k, v = sa.project_kv(z)
                if "k" in cache:
                    k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v  # every cached key is in the past: no mask needed
                heads, _ = sa.attend(sa.project_q(z), k, v)
                return sa.output_projection(sa.concat_heads(heads))

        def cross_attn(z):
            with record_function("decoder.cross_attn"):
                heads, _ = ca.attend(ca.project_q(z), *memory_kv, memory_mask)
                return ca.output_projection(ca.concat_heads(heads))

        return self._feed(y, self_attn, cross_attn)

    def _feed(self, y, self_attn, cross_attn):
        y = self._sublayer(y, self_attn, self.norm1, self.dropout1)
        y = self._sublayer(y, cross_attn, self.norm2, self.dropout2)
        return self._sublayer(y, self.ffn, self.norm3, self.dropout3)

    def load_torch(self, layer: nn.TransformerDecoderLayer) -> None:
        _copy_attention(self.self_attn, layer.self_attn)
        _copy_attention(self.cross_attn, layer.multihead_attn)
        self._load_ffn_and_norms(layer, 3)


class Encoder(nn.Module):
    """A stack of N encoder layers and a final LayerNorm (as torch.nn.Transformer has one)."""

    def __init__(self, layers: list[EncoderLayer], norm: nn.LayerNorm):
        super().__init__()
        self.layers, self.norm = nn.ModuleList(layers), norm

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, key_padding_mask)
        with record_function("final_norm"):
            return self.norm(x)


class Decoder(nn.Module):
    """A stack of N decoder layers and a final LayerNorm."""

    def __init__(self, layers: list[DecoderLayer], norm: nn.LayerNorm):
        super().__init__()
        self.layers, self.norm = nn.ModuleList(layers), norm

    def forward(self, y, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None) -> torch.Tensor:
        for layer in self.layers:
            y = layer(y, memory, tgt_key_padding_mask, memory_key_padding_mask)
        with record_function("final_norm"):
            return self.norm(y)

    def step(self, y, memory_kvs, caches, memory_mask=None) -> torch.Tensor:
        """One new position through every layer, with per-layer caches (see DecoderLayer.step)."""
        for layer, kv, cache in zip(self.layers, memory_kvs, caches, strict=True):
            y = layer.step(y, kv, cache, memory_mask)
        with record_function("final_norm"):
            return self.norm(y)
