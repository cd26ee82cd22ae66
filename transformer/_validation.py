"""Input checks shared by the models: every bad value gets an error that names it and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


def check_choice(name: str, value: str, allowed: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise naming both."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; allowed: {', '.join(map(repr, allowed))}")
    return value


def check_positive(name: str, value: int) -> int:
    """Return ``value`` if it is a positive int, else raise naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_positives(**values: int) -> None:
    """check_positive for each keyword argument, in order: ``check_positives(batch=b, n_src=n)``."""
    for name, value in values.items():
        check_positive(name, value)


def check_bool(name: str, value) -> bool:
    """Return ``value`` if it is a bool (not merely truthy: ``causal="no"`` is a mistake), else raise."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def check_probability(name: str, value: float) -> float:
    """A dropout probability: a finite number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
    return float(value)


def check_positive_float(name: str, value: float) -> float:
    """A finite number > 0 (a LayerNorm epsilon, a softmax scale); NaN and infinity are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_heads(d_model: int, num_heads: int) -> int:
    """Return d_model // num_heads, the per-head width; d_model must split evenly (paper section 3.2.2)."""
    check_positive("d_model", d_model)
    check_positive("num_heads", num_heads)
    if d_model % num_heads:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}; "
            f"choose num_heads among the divisors of {d_model}"
        )
    return d_model // num_heads


def check_tensor(name: str, x: torch.Tensor, ndim: int | tuple[int, ...], last: int | None = None) -> None:
    """Check rank, non-empty sequence axis (dim -2) and, optionally, the feature size (dim -1)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    ranks = (ndim,) if isinstance(ndim, int) else ndim
    if x.dim() not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(x.shape)}")
    if x.dim() >= 2 and x.shape[-2] == 0:
        raise ValueError(f"{name} has an empty sequence (shape {tuple(x.shape)}); sequences need at least one position")
    if last is not None and x.shape[-1] != last:
        raise ValueError(f"{name} must have size {last} in its last dimension, got shape {tuple(x.shape)}")


def check_tokens(name: str, tokens: torch.Tensor, vocab: int) -> None:
    """Token ids: a (batch, length) integer tensor, length >= 1, ids in [0, vocab) (range checked on CPU)."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold integer token ids (int64 or int32), got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got {tuple(tokens.shape)}")
    if tokens.shape[0] == 0:
        raise ValueError(f"{name} holds no sequence (shape {tuple(tokens.shape)}); need a batch of at least one")
    if tokens.shape[1] == 0:
        raise ValueError(f"{name} is an empty sequence (shape {tuple(tokens.shape)}); need at least one token")
    if tokens.device.type == "cpu":  # on an accelerator the range check would force a device sync
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= vocab:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name} holds token id {bad}, outside the vocabulary [0, {vocab})")
