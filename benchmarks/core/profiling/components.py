"""The paper's components, as profiles and the performance model name them: the ``record_function`` labels the
models carry grouped into components (Q/K/V projections, scores, softmax, FFN, GRU step, ...), and the analytic
FLOP model's entries (``transformer.flops``) mapped to the same components."""

from __future__ import annotations

from collections import Counter

from ... import cases

#: record_function label -> the component it belongs to (the paper's terms), from the areas that add them
#: (``Area.components``). Labels that only group others (a whole encoder, one attention block) keep the time
#: of the operators directly inside them under "block glue" (Python and views between the labelled steps,
#: e.g. splitting the heads).
COMPONENTS = cases.components()
GROUPING = ("encoder", "decoder", "encoder.self_attn", "decoder.self_attn", "decoder.cross_attn")
UNLABELLED, GLUE = "unlabelled", "block glue"
#: components whose time is matmul work by construction (the rest is elementwise, memory or glue)
MATMUL_COMPONENTS = {"Q/K/V projections", "scores Q·Kᵀ", "weights·V", "fused attention (SDPA)", "W_O", "FFN",
                     "generator", "biGRU encoder", "U_a·h (once)", "GRU step", "initial state", "readout",
                     "GRU layer"}


def component(labels: tuple[str, ...] | list[str]) -> str:
    """The component of an operator or label, from the labels around it (innermost that names one)."""
    for label in reversed(list(labels)):
        if label in COMPONENTS:
            return COMPONENTS[label]
        if label not in GROUPING:
            return label  # a label this table does not know yet: shown under its own name
    return GLUE if labels else UNLABELLED


def analytic_component(name: str, fused: bool) -> str:
    """The component an analytic FLOP entry (``transformer.flops`` dotted name) belongs to."""
    parts = name.split(".")
    last = parts[-1]
    if parts[0] == "recurrent_layer":
        return "GRU layer"
    if parts[0] == "encoder" and len(parts) > 1 and parts[1].startswith("bigru"):
        return "biGRU encoder"
    if parts[:2] == ["decoder", "init_state"]:
        return "initial state"
    if parts[:3] == ["decoder", "attention", "keys"]:
        return "U_a·h (once)"
    if parts[:2] == ["decoder", "attention"]:
        return "additive attention"
    if parts[:2] == ["decoder", "gru"]:
        return "GRU step"
    if parts[:2] == ["decoder", "readout"]:
        return "readout"
    if last in ("q_proj", "k_proj", "v_proj"):
        return "Q/K/V projections"
    if last in ("scores", "weights_v"):
        return "fused attention (SDPA)" if fused else {"scores": "scores Q·Kᵀ", "weights_v": "weights·V"}[last]
    if last == "out_proj":
        return "W_O"
    if "ffn" in parts:
        return "FFN"
    if name == "generator":
        return "generator"
    if name in COMPONENTS:  # an entry named as the label around its operators (its area's ``components``)
        return COMPONENTS[name]
    raise ValueError(f"analytic FLOP entry {name!r} has no component; name it as a label of its area's components")


def analytic_by_component(case: cases.Prepared, method: str, fused: bool) -> dict[str, int]:
    """The analytic matmul FLOPs of one method per component; a training step's backward is one component."""
    fwd = case.generate_flops.forward if method == "generate" else case.flops.forward
    out: Counter = Counter()
    for name, v in fwd.matmul.items():
        out[analytic_component(name, fused)] += v
    if method == "train_step":
        out["backward"] += case.flops.backward.matmul_total
    return {k: v for k, v in out.items() if v}
