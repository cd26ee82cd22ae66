"""The depth area: the sequential depth and the launches of the graph each model executes, tracked per commit
(claim C1, Table 1's sequential operations: O(1) for self-attention, O(n) for a recurrent layer)."""

import torch

from transformer import flops

from .area import Area, Prepared, on_device, synchronized, train_step
from .bench_models import model_and_tokens, model_flops
from .common import grid_params
from .core import opgraph

#: the modes: what each model runs (greedy generation makes seq_len new tokens)
MODES = ("forward", "train_step", "generate")
#: sequences per call (the executed graph does not depend on the batch)
BATCH = 1


def tokens(params: dict, method: str = "graph") -> int:
    return BATCH * params["seq_len"]


def build(model: str, preset: str, mode: str, seq_len: int, device: str) -> Prepared:
    """The graph one call executes: a teacher-forced forward, a training step, or greedy generation of seq_len
    new tokens, on source (and target) of seq_len tokens. Its one method, "graph", is recorded by
    benchmarks.core.opgraph: sequential depth and launches."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    dev = on_device(device)
    m, config, is_tf, src, tgt = model_and_tokens(model, preset, BATCH, seq_len, dev)
    if mode == "generate":
        fn, work = (lambda: m.generate(src, seq_len, bos_id=0)), model_flops(config, is_tf, BATCH, seq_len,
                                                                              seq_len).forward
    else:
        f = model_flops(config, is_tf, BATCH, seq_len, device=dev)
        if mode == "forward":
            fn, work = torch.no_grad()(lambda: m(src, tgt)), f.forward
        else:
            fn, work = train_step(m, lambda: m(src, tgt)), f.train
    return Prepared(synchronized(fn, dev), flops.Flops(work, flops.Breakdown()), tokens=BATCH * seq_len,
                    device=dev.type, graph_only=True)


_DEFAULT = {"model": ["transformer", "rnn-width"], "preset": ["tiny"], "mode": list(MODES),
            "seq_len": [8, 16, 32, 64], "device": ["cpu"]}
AREA = Area(
    name="depth",
    axes={"quick": {**_DEFAULT, "seq_len": [8, 16]}, "default": _DEFAULT,
          "full": {**_DEFAULT, "preset": ["tiny", "paper-base"], "seq_len": [8, 16, 32, 64, 128]}},
    build=build,
    tokens=tokens,
    methods=("graph",),
)


class SequentialDepth:
    """Operators on the critical path, and operators launched, per model, mode and sequence length."""

    area = AREA.name
    params, param_names = grid_params(AREA)
    timeout = 300

    def setup(self, *params):
        torch.manual_seed(0)
        self.graph = opgraph.record(AREA.build(**dict(zip(self.param_names, params, strict=True))).forward)

    def track_sequential_depth(self, *params):
        return self.graph.depth

    track_sequential_depth.unit = "operators"

    def track_op_launches(self, *params):
        return self.graph.launches

    track_op_launches.unit = "operators"
