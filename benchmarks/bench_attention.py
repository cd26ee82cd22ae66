"""The attention area: equation (1) alone over sequence length, head dim, backend, causal, dtype and device
(claims C2, C6: where the time of attention goes as n grows, and how far the fused kernel is from the GEMM peak)."""

import torch

from transformer import flops, scaled_dot_product_attention

from .area import Area, Prepared, Skip, on_device, synchronized
from .common import _CaseBenchmark

#: Tokens per attention call (batch x sequence length held fixed, as FlashAttention's benchmarks do).
TOKENS = {"cpu": 4096, "cuda": 16384}
#: The largest sequence length per device (score memory grows as n^2).
MAX_SEQ_LEN = {"cpu": 4096, "cuda": 8192}
HEADS = 8


def tokens(params: dict, method: str = "forward") -> int:
    n = params["seq_len"]
    return max(1, TOKENS[params["device"]] // n) * n


def build(seq_len: int, d_head: int, backend: str, causal: bool, dtype: str, device: str) -> Prepared:
    """Equation (1) on (batch, 8 heads, n, d_head), batch * n = TOKENS[device]."""
    dev = on_device(device)
    if dev.type == "cpu" and dtype != "float32":
        raise Skip(f"dtype {dtype} is benchmarked on GPUs only")
    if seq_len > MAX_SEQ_LEN[dev.type]:
        raise Skip(f"seq_len {seq_len} is above this device's cap {MAX_SEQ_LEN[dev.type]}")
    batch = tokens({"seq_len": seq_len, "device": dev.type}) // seq_len
    q, k, v = (torch.randn(batch, HEADS, seq_len, d_head, device=dev, dtype=getattr(torch, dtype)) for _ in range(3))

    def call():
        return scaled_dot_product_attention(q, k, v, causal=causal, backend=backend)

    f = flops.attention(batch * HEADS, seq_len, seq_len, d_head, backend=backend, causal=causal, device=dev,
                        dtype=getattr(torch, dtype))
    return Prepared(synchronized(torch.no_grad()(call), dev), f, tokens=batch * seq_len, device=dev.type,
                    dtype=dtype)


AREA = Area(
    name="attention",
    axes={
        "quick": {"seq_len": [128, 512], "d_head": [64], "backend": ["math", "sdpa"], "causal": [False, True],
                  "dtype": ["float32"], "device": ["cpu", "cuda"]},
        "default": {"seq_len": [128, 256, 512, 1024, 2048], "d_head": [64], "backend": ["math", "sdpa"],
                    "causal": [False], "dtype": ["float32"], "device": ["cpu", "cuda"]},
        "full": {"seq_len": [128, 256, 512, 1024, 2048, 4096, 8192], "d_head": [64, 128],
                 "backend": ["math", "sdpa"], "causal": [False, True],
                 "dtype": ["float32", "float16", "bfloat16"], "device": ["cpu", "cuda"]},
    },
    build=build,
    tokens=tokens,
    components={"attention.scores": "scores Q·Kᵀ", "attention.mask": "mask", "attention.softmax": "softmax",
                "attention.weights_v": "weights·V", "attention.sdpa": "fused attention (SDPA)"},
)


class ScaledDotProductAttention(_CaseBenchmark):
    AREA = AREA
