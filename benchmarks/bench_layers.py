"""The layers area, Table 1: a self-attention layer against a recurrent layer over sequence length and width
(the n < d rule: self-attention does fewer FLOPs than a recurrent layer while n is below d)."""

import torch

from transformer import MultiHeadAttention, RecurrentLayer, flops

from .area import Area, Prepared, on_device, synchronized
from .common import _CaseBenchmark

#: sequences per call, and the heads of the self-attention layer
BATCH, HEADS = 4, 8
LAYERS = ("self-attention", "recurrent")


def tokens(params: dict, method: str = "forward") -> int:
    return BATCH * params["seq_len"]


def layer_flops(layer: str, seq_len: int, d_model: int, device="cpu") -> flops.Flops:
    """The FLOP model of one of Table 1's layers on BATCH sequences."""
    if layer == "self-attention":
        return flops.multi_head_attention(BATCH, seq_len, d_model, HEADS, strategy="sdpa", device=device)
    if layer == "recurrent":
        return flops.recurrent_layer(BATCH, seq_len, d_model)
    raise ValueError(f"unknown layer {layer!r}; allowed: {', '.join(LAYERS)}")


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


def build(layer: str, seq_len: int, d_model: int, device: str) -> Prepared:
    """Table 1: a self-attention layer (8 heads, fused SDPA, with projections; 8nd² + 4n²d FLOPs) against
    a recurrent layer (a GRU; 12nd²) on BATCH sequences of n tokens. Their FLOPs cross at n = d."""
    dev = on_device(device)
    x = torch.randn(BATCH, seq_len, d_model, device=dev)
    f = layer_flops(layer, seq_len, d_model, dev)
    m = (MultiHeadAttention(d_model, HEADS, strategy="sdpa", device=dev) if layer == "self-attention"
         else RecurrentLayer(d_model, device=dev))
    return Prepared(synchronized(torch.no_grad()(lambda: m(x)), dev), f, tokens=BATCH * seq_len, device=dev.type)


AREA = Area(
    name="layers",
    axes={
        "quick": {"layer": list(LAYERS), "seq_len": [64, 256], "d_model": [128], "device": ["cpu", "cuda"]},
        "default": {"layer": list(LAYERS), "seq_len": [32, 64, 128, 256, 512, 1024], "d_model": [128, 256, 512],
                    "device": ["cpu", "cuda"]},
        "full": {"layer": list(LAYERS), "seq_len": [16, 32, 64, 128, 256, 512, 1024, 2048],
                 "d_model": [128, 256, 512, 1024], "device": ["cpu", "cuda"]},
    },
    build=build,
    tokens=tokens,
    components={"recurrent_layer.gru": "GRU layer"},
)


class SelfAttentionVsRecurrentLayer(_CaseBenchmark):
    AREA = AREA
