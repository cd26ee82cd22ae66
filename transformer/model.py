"""The encoder-decoder Transformer of "Attention Is All You Need" (section 3, figure 1).

Token embeddings scaled by sqrt(d_model) plus sinusoidal positions feed an encoder stack; the decoder
stack attends causally to its own prefix and, through cross-attention, to the encoder output (its K
and V, the decoder state being Q); a linear generator gives next-token logits. Greedy decoding runs
with or without a key/value cache: with it, each step feeds only the newest token (claim C1 is about
what stays sequential).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn
from torch.profiler import record_function

from ._validation import (
    check_bool,
    check_choice,
    check_heads,
    check_positive,
    check_positive_float,
    check_probability,
    check_tokens,
)
from .decoding import greedy_decode
from .layers import ACTIVATIONS, Decoder, DecoderLayer, Embeddings, Encoder, EncoderLayer, PositionalEncoding
from .multihead import STRATEGIES


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters; the defaults are the paper's base model (section 6.1, table 3)."""

    src_vocab: int = 37000
    tgt_vocab: int = 37000
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    norm_first: bool = False
    share_embeddings: bool = True
    activation: str = "relu"
    layer_norm_eps: float = 1e-5
    strategy: str = "sdpa"

    def __post_init__(self):
        check_heads(self.d_model, self.num_heads)
        for name in ("src_vocab", "tgt_vocab", "d_ff", "num_encoder_layers", "num_decoder_layers"):
            check_positive(name, getattr(self, name))
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("strategy", self.strategy, STRATEGIES)
        check_probability("dropout", self.dropout)
        check_positive_float("layer_norm_eps", self.layer_norm_eps)
        check_bool("norm_first", self.norm_first)
        check_bool("share_embeddings", self.share_embeddings)
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError(
                f"share_embeddings=True needs src_vocab == tgt_vocab, got {self.src_vocab} and {self.tgt_vocab}"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    @classmethod
    def preset(cls, name: str, **overrides) -> TransformerConfig:
        """A named configuration (see PRESETS), with any field overridden."""
        check_choice("preset", name, PRESETS)
        return dataclasses.replace(PRESETS[name], **overrides)


PRESETS: dict[str, TransformerConfig] = {
    "paper-base": TransformerConfig(),
    "paper-big": TransformerConfig(d_model=1024, num_heads=16, d_ff=4096, dropout=0.3),
    "tiny": TransformerConfig(src_vocab=64, tgt_vocab=64, d_model=32, num_heads=4, d_ff=64,
                              num_encoder_layers=2, num_decoder_layers=2, dropout=0.0),
}


class Transformer(nn.Module):
    """Encoder-decoder Transformer: embeddings + positions, N encoder and N decoder layers, generator."""

    def __init__(self, config: TransformerConfig, device=None, dtype=None):
        super().__init__()
        self.config = c = config
        f = {"device": device, "dtype": dtype}
        layer_args = dict(dropout=c.dropout, norm_first=c.norm_first, strategy=c.strategy,
                          activation=c.activation, layer_norm_eps=c.layer_norm_eps, **f)
        self.src_embed = Embeddings(c.src_vocab, c.d_model, **f)
        self.tgt_embed = self.src_embed if c.share_embeddings else Embeddings(c.tgt_vocab, c.d_model, **f)
        self.positions = PositionalEncoding(c.d_model, c.dropout)
        self.encoder = Encoder(
            [EncoderLayer(c.d_model, c.num_heads, c.d_ff, **layer_args) for _ in range(c.num_encoder_layers)],
            nn.LayerNorm(c.d_model, eps=c.layer_norm_eps, **f),
        )
        self.decoder = Decoder(
            [DecoderLayer(c.d_model, c.num_heads, c.d_ff, **layer_args) for _ in range(c.num_decoder_layers)],
            nn.LayerNorm(c.d_model, eps=c.layer_norm_eps, **f),
        )
        self.generator = nn.Linear(c.d_model, c.tgt_vocab, bias=False, **f)
        if c.share_embeddings:  # section 3.4: one matrix for both embeddings and the pre-softmax linear map
            self.generator.weight = self.tgt_embed.lut.weight
        self.to(device)

    @classmethod
    def from_preset(cls, name: str, device=None, dtype=None, **overrides) -> Transformer:
        return cls(TransformerConfig.preset(name, **overrides), device=device, dtype=dtype)

    @classmethod
    def from_torch(cls, module: nn.Transformer, src_vocab: int, tgt_vocab: int | None = None,
                   **overrides) -> Transformer:
        """A model whose encoder and decoder stacks (and their final norms) carry ``module``'s weights.

        torch.nn.Transformer has no embeddings or generator; ours are freshly initialised. After the
        copy, ``model.decoder(tgt, model.encoder(src))`` equals ``module(src, tgt, tgt_is_causal=True,
        tgt_mask=causal)`` for batch-first inputs with dropout off.
        """
        if not isinstance(module, nn.Transformer):
            raise TypeError(f"from_torch expects torch.nn.Transformer, got {type(module).__name__}")
        enc, dec = module.encoder.layers, module.decoder.layers
        act = {1: "relu", 2: "gelu"}.get(enc[0].activation_relu_or_gelu)
        if act is None:
            raise ValueError("from_torch supports relu or gelu activations only")
        tgt_vocab = src_vocab if tgt_vocab is None else tgt_vocab
        config = TransformerConfig(
            src_vocab=src_vocab, tgt_vocab=tgt_vocab, share_embeddings=src_vocab == tgt_vocab,
            d_model=module.d_model, num_heads=module.nhead, d_ff=enc[0].linear1.out_features,
            num_encoder_layers=len(enc), num_decoder_layers=len(dec), dropout=enc[0].dropout.p,
            norm_first=enc[0].norm_first, activation=act, layer_norm_eps=enc[0].norm1.eps, **overrides,
        )
        w = enc[0].linear1.weight
        model = cls(config, device=w.device, dtype=w.dtype)
        for ours, theirs in zip(model.encoder.layers, enc, strict=True):
            ours.load_torch(theirs)
        for ours, theirs in zip(model.decoder.layers, dec, strict=True):
            ours.load_torch(theirs)
        model.encoder.norm.load_state_dict(module.encoder.norm.state_dict())
        model.decoder.norm.load_state_dict(module.decoder.norm.state_dict())
        return model

    # -- teacher-forced forward ------------------------------------------------------------------

    def forward(self, src, tgt, src_key_padding_mask=None, tgt_key_padding_mask=None) -> torch.Tensor:
        """Next-token logits (batch, n_tgt, tgt_vocab) for every target position at once (teacher forcing)."""
        memory = self.encode(src, src_key_padding_mask)
        return self.logits(self.decode(tgt, memory, src_key_padding_mask, tgt_key_padding_mask))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The generator: the final linear map to next-token logits (section 3.4)."""
        with record_function("generator"):
            return self.generator(hidden)

    def encode(self, src: torch.Tensor, src_key_padding_mask=None) -> torch.Tensor:
        """The encoder output (batch, n_src, d_model): the K and V of every cross-attention."""
        check_tokens("src", src, self.config.src_vocab)
        with record_function("encoder"):
            return self.encoder(self.positions(self.src_embed(src)), src_key_padding_mask)

    def decode(self, tgt, memory, memory_key_padding_mask=None, tgt_key_padding_mask=None) -> torch.Tensor:
        """The decoder output (batch, n_tgt, d_model) for all target positions, causally masked."""
        check_tokens("tgt", tgt, self.config.tgt_vocab)
        if tgt.shape[0] != memory.shape[0]:
            raise ValueError(f"tgt has batch size {tgt.shape[0]} but the encoder output has {memory.shape[0]}")
        with record_function("decoder"):
            y = self.positions(self.tgt_embed(tgt))
            return self.decoder(y, memory, tgt_key_padding_mask, memory_key_padding_mask)

    # -- greedy decoding -------------------------------------------------------------------------

    @torch.no_grad()
    def generate(self, src, max_new_tokens: int, bos_id: int, eos_id: int | None = None,
                 use_cache: bool = True, src_key_padding_mask=None) -> torch.Tensor:
        """Greedy decoding: (batch, 1 + steps) tokens starting with ``bos_id`` (see decoding.greedy_decode).

        Without a cache every step re-runs the decoder over the whole prefix; with it, each step
        runs only the newest token against cached keys and values.
        """
        memory = self.encode(src, src_key_padding_mask)
        if use_cache:
            step = self._cached_stepper(memory, src_key_padding_mask)

            def next_logits(ys, t):
                return self.logits(step(ys[:, -1:], t))
        else:

            def next_logits(ys, t):
                return self.logits(self.decode(ys, memory, src_key_padding_mask)[:, -1])

        return greedy_decode(next_logits, src.shape[0], max_new_tokens, bos_id, eos_id, self.config.tgt_vocab,
                             src.device)

    def _cached_stepper(self, memory, src_key_padding_mask):
        """A function (newest token, its position) -> decoder output, holding the key/value caches."""
        memory_kvs = [layer.cross_attn.project_kv(memory) for layer in self.decoder.layers]
        caches = [{} for _ in self.decoder.layers]
        memory_mask = None if src_key_padding_mask is None else ~src_key_padding_mask[:, None, None, :]

        def step(token, position):
            y = self.positions(self.tgt_embed(token), offset=position)
            return self.decoder.step(y, memory_kvs, caches, memory_mask)[:, -1]

        return step

