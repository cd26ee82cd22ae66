"""The Bahdanau RNNsearch baseline (C9): additive attention recomputed at every decoder step."""

import pytest
import torch

from transformer import RNNAttention, RNNAttentionConfig, Transformer, TransformerConfig, parameter_count

F64 = torch.float64


def tokens(batch, n, vocab=64):
    return torch.randint(0, vocab, (batch, n))


def test_attention_weights_are_distributions_over_source_positions():
    m = RNNAttention.from_preset("tiny", dtype=F64)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[0, 6:] = True
    logits, alpha = m(tokens(3, 9), tokens(3, 5), src_key_padding_mask=pad, return_attention=True)
    assert logits.shape == (3, 5, 64) and alpha.shape == (3, 5, 9)
    assert (alpha >= 0).all()
    torch.testing.assert_close(alpha.sum(-1), torch.ones(3, 5, dtype=F64))
    assert (alpha[0, :, 6:] == 0).all()  # padding gets no weight


def test_energy_is_the_additive_formula():
    """e_ij = v_a^T tanh(W_a s_(i-1) + U_a h_j), alpha = softmax_j(e), c = sum_j alpha_ij h_j."""
    m = RNNAttention.from_preset("tiny", dtype=F64)
    att = m.attention
    s, h = torch.randn(2, 32, dtype=F64), torch.randn(2, 7, 64, dtype=F64)
    context, alpha = att(s, att.precompute(h), h)
    def energy(b, j):  # e_ij = v_aᵀ tanh(W_a s_(i-1) + U_a h_j)
        return att.v_a.weight[0] @ torch.tanh(att.W_a.weight @ s[b] + att.U_a.weight @ h[b, j] + att.U_a.bias)

    e = torch.stack([torch.stack([energy(b, j) for j in range(7)]) for b in range(2)])
    torch.testing.assert_close(alpha, torch.softmax(e, -1))
    torch.testing.assert_close(context, torch.einsum("bj,bjd->bd", alpha, h))


def test_padding_gives_the_same_result_as_the_unpadded_sentence():
    m = RNNAttention.from_preset("tiny", dtype=F64)
    src, tgt = tokens(2, 9), tokens(2, 4)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[0, 6:] = True
    padded = m(src, tgt, src_key_padding_mask=pad)
    torch.testing.assert_close(padded[:1], m(src[:1, :6], tgt[:1]))


def test_greedy_decoding_follows_the_teacher_forced_argmax():
    m = RNNAttention.from_preset("tiny", dtype=F64).eval()
    src = tokens(3, 7)
    out = m.generate(src, 8, bos_id=2)
    assert out.shape == (3, 9) and (out[:, 0] == 2).all()
    assert torch.equal(m(src, out[:, :-1]).argmax(-1), out[:, 1:])


def test_gradients_reach_every_parameter():
    m = RNNAttention.from_preset("tiny")
    m(tokens(2, 6), tokens(2, 5)).square().mean().backward()
    assert not [n for n, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]


def test_matching_configs():
    tf = TransformerConfig.preset("paper-base")
    width = RNNAttentionConfig.matching(tf, "width")
    assert (width.emb_dim, width.enc_hidden, width.dec_hidden, width.align_dim) == (512,) * 4
    assert (width.src_vocab, width.tgt_vocab) == (tf.src_vocab, tf.tgt_vocab)
    params = RNNAttentionConfig.matching(tf, "params")
    target = parameter_count(Transformer(tf, device="meta"))
    n = parameter_count(RNNAttention(params, device="meta"))
    one_wider = parameter_count(RNNAttention(RNNAttentionConfig._with_hidden(
        dict(src_vocab=tf.src_vocab, tgt_vocab=tf.tgt_vocab, emb_dim=512), params.enc_hidden + 1), device="meta"))
    assert abs(n - target) <= abs(one_wider - target)
    assert abs(n - target) / target < 0.01


def test_paper_preset():
    c = RNNAttentionConfig.preset("rnnsearch")
    assert (c.emb_dim, c.enc_hidden, c.dec_hidden, c.maxout_units) == (620, 1000, 1000, 500)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: RNNAttentionConfig.preset("lstm"), "unknown preset 'lstm'"),
        (lambda: RNNAttentionConfig(enc_hidden=0), "enc_hidden must be a positive integer"),
        (lambda: RNNAttentionConfig.matching(TransformerConfig.preset("tiny"), "flops"), "unknown match 'flops'"),
        (lambda: RNNAttention.from_preset("tiny")(tokens(2, 0), tokens(2, 3)), "src is an empty sequence"),
        (lambda: RNNAttention.from_preset("tiny")(tokens(2, 3), tokens(3, 3)), "batch size"),
        (lambda: RNNAttention.from_preset("tiny")(tokens(2, 3), tokens(2, 3, 99)), "token id"),
        (lambda: RNNAttention.from_preset("tiny").generate(tokens(2, 3), 2, bos_id=-1), "bos_id=-1"),
    ],
)
def test_bad_input_is_named(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_the_parameter_match_skips_initialisers_on_meta_tensors_only():
    from transformer import rnn_attention

    meta, real = torch.empty(4, 3, device="meta"), torch.zeros(4, 3)
    torch.manual_seed(0)
    with rnn_attention._on_meta():
        assert torch.nn.init.normal_(meta) is meta and meta.normal_() is meta
        torch.nn.init.normal_(real)  # a real tensor is initialised as ever, from the same random stream
    torch.manual_seed(0)
    assert torch.equal(real, torch.nn.init.normal_(torch.zeros(4, 3)))
