"""FLOPs of the encoder-decoder Transformer (section 3, figure 1): teacher-forced and greedy generation."""

from __future__ import annotations

import torch

from .._validation import check_positives
from ..model import TransformerConfig
from .attention_flops import sdpa_recomputes, tally_mha
from .tally import Breakdown, Flops, Tally


def transformer(config: TransformerConfig, batch: int, n_src: int, n_tgt: int, *,
                src_padding: bool = False, tgt_padding: bool = False, device="cpu", dtype=torch.float32) -> Flops:
    """Teacher-forced ``Transformer.forward`` in train mode (logits for every target position) and its
    backward. ``device`` and ``dtype`` matter only through ``sdpa_recomputes`` (strategy 'sdpa')."""
    check_positives(batch=batch, n_src=n_src, n_tgt=n_tgt)
    t = Tally()
    t.recompute = config.strategy == "sdpa" and sdpa_recomputes(config.d_head, masked=True, dropout_p=config.dropout,
                                                                device=device, dtype=dtype)
    _embed(t, "src_embed", config, batch * n_src)
    _encoder(t, config, batch, n_src, src_padding)
    _embed(t, "tgt_embed", config, batch * n_tgt)
    _decoder(t, config, batch, n_tgt, n_tgt, n_src, src_padding, tgt_padding, causal=True)
    t.linear("generator", batch * n_tgt, config.d_model, config.tgt_vocab, bias=False)
    return t.flops()


def transformer_generate(config: TransformerConfig, batch: int, n_src: int, steps: int, *,
                         use_cache: bool = True) -> Flops:
    """Greedy ``Transformer.generate`` for ``steps`` new tokens (no early stop); forward only."""
    check_positives(batch=batch, n_src=n_src, steps=steps)
    t = Tally()
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
        _decoder(t, config, batch, n_q, step + 1, n_src, False, False, causal=not use_cache,
                 project_memory=not use_cache)
        t.linear("generator", batch, config.d_model, config.tgt_vocab, bias=False)
    f = t.flops()
    return Flops(f.forward, Breakdown())


def _embed(t: Tally, name: str, c: TransformerConfig, rows: int) -> None:
    t.elementwise(name, "scale", rows * c.d_model)
    t.elementwise(name, "positional", rows * c.d_model)


def _add_norm(t: Tally, c: TransformerConfig, rows: int) -> None:
    t.elementwise("residual", "residual", rows * c.d_model)
    t.elementwise("layernorm", "layernorm", rows * c.d_model)


def _ffn(t: Tally, c: TransformerConfig, rows: int) -> None:
    with t.scope("ffn"):
        t.linear("linear1", rows, c.d_model, c.d_ff)
        t.elementwise(c.activation, c.activation, rows * c.d_ff)
        t.linear("linear2", rows, c.d_ff, c.d_model)


def _encoder(t: Tally, c: TransformerConfig, batch: int, n: int, padding: bool) -> None:
    rows = batch * n
    with t.scope("encoder"):
        for _ in range(c.num_encoder_layers):
            with t.scope("self_attn"):
                tally_mha(t, batch, n, n, c.d_model, c.num_heads, c.strategy, True, True, padding, True, t.recompute)
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
                    tally_mha(t, batch, n_q, n_q, c.d_model, c.num_heads, c.strategy, True, True, causal or tgt_padding,
                         True, t.recompute)
                else:  # cached step: only the new position's K and V are projected
                    tally_mha(t, batch, n_q, n_k_self, c.d_model, c.num_heads, c.strategy, True, True, False, True,
                         t.recompute, project_kv=False)
                    t.linear("k_proj", rows, c.d_model, c.d_model)
                    t.linear("v_proj", rows, c.d_model, c.d_model)
            _add_norm(t, c, rows)
            with t.scope("cross_attn"):
                tally_mha(t, batch, n_q, n_src, c.d_model, c.num_heads, c.strategy, True, True, src_padding, True,
                     t.recompute, project_kv=project_memory)
            _add_norm(t, c, rows)
            _ffn(t, c, rows)
            _add_norm(t, c, rows)
        t.elementwise("final_norm", "layernorm", rows * c.d_model)
