"""Greedy autoregressive decoding, shared by the Transformer and the RNN baseline: one token per step,
each step depending on the last (the part of inference that no model parallelises, claim C1)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.profiler import record_function

from ._validation import check_positive


def check_token_id(name: str, value: int, vocab: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
        raise ValueError(f"{name}={value!r} is not a token id in [0, {vocab})")


@torch.no_grad()
def greedy_decode(
    next_logits: Callable[[torch.Tensor, int], torch.Tensor],
    batch: int,
    max_new_tokens: int,
    bos_id: int,
    eos_id: int | None,
    vocab: int,
    device: torch.device,
) -> torch.Tensor:
    """(batch, 1 + steps) tokens starting with ``bos_id``; ``next_logits(tokens so far, step)`` gives
    (batch, vocab) logits for the next token. Stops early once every row has produced ``eos_id``;
    later positions of finished rows hold ``eos_id``."""
    check_positive("max_new_tokens", max_new_tokens)
    check_token_id("bos_id", bos_id, vocab)
    if eos_id is not None:
        check_token_id("eos_id", eos_id, vocab)
    ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        with record_function("decode_step"):
            nxt = next_logits(ys, t).argmax(-1)
        if eos_id is not None:
            nxt = nxt.masked_fill(done, eos_id)
            done |= nxt == eos_id
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        if eos_id is not None and bool(done.all()):
            break
    return ys
