"""FLOPs of the RNN-attention baseline (Bahdanau et al. 2015) and of Table 1's recurrent layer."""

from __future__ import annotations

from .._validation import check_positives
from ..rnn_attention import RNNAttentionConfig
from .tally import Breakdown, Flops, Tally


def rnn_attention(config: RNNAttentionConfig, batch: int, n_src: int, n_tgt: int) -> Flops:
    """Teacher-forced ``RNNAttention.forward`` and its backward, for unpadded batches (with a padding
    mask the encoder skips the padded steps, so its GRU does less than this)."""
    check_positives(batch=batch, n_src=n_src, n_tgt=n_tgt)
    t = Tally()
    _rnn_encode(t, config, batch, n_src)
    for _ in range(n_tgt):
        _rnn_step(t, config, batch, n_src)
    _rnn_output(t, config, batch * n_tgt)
    return t.flops()


def rnn_attention_generate(config: RNNAttentionConfig, batch: int, n_src: int, steps: int) -> Flops:
    """Greedy ``RNNAttention.generate`` for ``steps`` new tokens (no early stop); forward only."""
    check_positives(batch=batch, n_src=n_src, steps=steps)
    t = Tally()
    _rnn_encode(t, config, batch, n_src)
    for _ in range(steps):
        _rnn_step(t, config, batch, n_src)
        _rnn_output(t, config, batch)
    return Flops(t.flops().forward, Breakdown())


def recurrent_layer(batch: int, n: int, d_model: int) -> Flops:
    """Table 1's recurrent layer (RecurrentLayer): a GRU of width d_model over n steps, 12·n·d² matmul FLOPs
    per sequence, against self-attention's 8·n·d² + 4·n²·d; the two are equal at n = d."""
    check_positives(batch=batch, n=n, d_model=d_model)
    t = Tally()
    _gru(t, "recurrent_layer", batch, d_model, d_model, n, h0_grad=False)
    return t.flops()


def _gru(t: Tally, name: str, batch: int, d_in: int, hidden: int, steps: int, h0_grad: bool) -> None:
    """``steps`` GRU steps: gates from W_ih x (+ b_ih) and W_hh h (+ b_hh), then the cell's elementwise work."""
    with t.scope(name):
        for step in range(steps):
            t.linear("gates_input", batch, d_in, 3 * hidden)
            t.linear("gates_hidden", batch, hidden, 3 * hidden, input_grad=h0_grad or step > 0)
            t.elementwise("cell", "gru_cell", batch * hidden)


def _rnn_encode(t: Tally, c: RNNAttentionConfig, batch: int, n_src: int) -> None:
    with t.scope("encoder"):
        for direction in ("forward", "backward"):
            _gru(t, f"bigru_{direction}", batch, c.emb_dim, c.enc_hidden, n_src, h0_grad=False)
    with t.scope("decoder"):
        t.linear("init_state", batch, c.enc_hidden, c.dec_hidden)
        t.elementwise("init_state", "tanh", batch * c.dec_hidden)
        t.linear("attention.keys", batch * n_src, 2 * c.enc_hidden, c.align_dim)


def _rnn_step(t: Tally, c: RNNAttentionConfig, batch: int, n_src: int) -> None:
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


def _rnn_output(t: Tally, c: RNNAttentionConfig, rows: int) -> None:
    with t.scope("decoder"):
        t.linear("readout", rows, c.dec_hidden + 2 * c.enc_hidden + c.emb_dim, 2 * c.maxout_units)
        t.elementwise("readout", "maxout", rows * c.maxout_units)
    t.linear("generator", rows, c.maxout_units, c.tgt_vocab)
