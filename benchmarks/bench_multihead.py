"""The multihead area: multi-head attention at fixed d_model over heads 1..64, strategy, and with or without
W_O (claims C3, C4: one large attention and many small heads cost the same FLOPs; what W_O adds)."""

import torch

import transformer
from transformer import flops

from .area import Area, Prepared, on_device, synchronized, train_step
from .common import _CaseBenchmark

#: the shape every multihead case runs at
SHAPE = {"batch": 8, "seq_len": 256, "d_model": 512}


def tokens(params: dict, method: str = "forward") -> int:
    return SHAPE["batch"] * SHAPE["seq_len"]


def build(heads: int, strategy: str, out_proj: bool, device: str) -> Prepared:
    """MultiHeadAttention at fixed d_model = 512 (claims C3, C4): same matmul FLOPs for every h."""
    dev = on_device(device)
    m = transformer.MultiHeadAttention(SHAPE["d_model"], heads, strategy=strategy, out_proj=out_proj, device=dev)
    x = torch.randn(SHAPE["batch"], SHAPE["seq_len"], SHAPE["d_model"], device=dev)
    f = flops.multi_head_attention(SHAPE["batch"], SHAPE["seq_len"], SHAPE["d_model"], heads, strategy=strategy,
                                   out_proj=out_proj, device=dev)
    return Prepared(synchronized(torch.no_grad()(lambda: m(x)), dev), f, tokens=tokens({}), device=dev.type,
                    train_step=synchronized(train_step(m, lambda: m(x)), dev))


_AXES = {"heads": [1, 2, 4, 8, 16, 32, 64], "strategy": ["batched", "looped", "sdpa"], "out_proj": [True, False],
         "device": ["cpu", "cuda"]}

AREA = Area(
    name="multihead",
    axes={"quick": {"heads": [1, 8, 64], "strategy": ["batched", "looped", "sdpa"], "out_proj": [True],
                    "device": ["cpu", "cuda"]},
          "default": _AXES, "full": _AXES},
    build=build,
    tokens=tokens,
    methods=("forward", "train_step"),
    # W_O's cost (out_proj False) is read on the batched strategy only
    keep={"default": lambda p: p["out_proj"] or p["strategy"] == "batched"},
    # the quick grid (a first look; the tests' main job) times the forward pass only: C3 reads the forward pass, and
    # the heads' training step took a third of the quick grid's time
    keep_method={"quick": lambda p, m: m == "forward"},
    components={"mha.qkv_proj": "Q/K/V projections", "mha.q_proj": "Q/K/V projections",
                "mha.kv_proj": "Q/K/V projections", "mha.k_proj": "Q/K/V projections",
                "mha.v_proj": "Q/K/V projections", "mha.head_proj": "Q/K/V projections", "mha.concat": "concat heads",
                "mha.out_proj": "W_O"},
)


class MultiHeadAttention(_CaseBenchmark):
    AREA = AREA

    def time_train_step(self, peaks, *params):
        self.case.train_step()
