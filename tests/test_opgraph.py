"""Sequential depth and launches are measured on the executed graph: known graphs give known depths, and
the models' depth in n has the slopes claim C1 predicts (or the test says otherwise)."""

import numpy as np
import pytest
import torch

from benchmarks import cases
from benchmarks.core import opgraph
from benchmarks.core.timing import measure


@pytest.mark.parametrize("k", [1, 4, 17])
def test_a_chain_of_k_operators_has_depth_k(k):
    x = torch.randn(4, 4)

    def chain():
        y = x
        for _ in range(k):
            y = y.sin()
        return y

    g = opgraph.record(chain)
    assert g.depth == k and g.launches == k


@pytest.mark.parametrize("k", [2, 8, 32])
def test_k_independent_branches_have_constant_depth(k):
    x = torch.randn(4, 4)
    g = opgraph.record(lambda: torch.stack([x * i for i in range(k)]).sum(0))
    assert g.depth == 3  # one multiply per branch, the stack, the sum: 1 + a constant
    assert g.launches == k + 2


def test_views_add_no_depth_and_in_place_writes_do():
    x = torch.randn(4, 4)

    def f():
        y = x.exp()  # 1
        z = y.view(16)[2:].view(2, 7)  # views: no launch, no depth
        z.mul_(2)  # in place, through the view: 2
        return (y + 1).sum()  # sees the write through the shared storage: 3, 4

    g = opgraph.record(f)
    assert g.depth == 4 and g.launches == 4


def test_labels_and_flops_are_recorded_per_operator():
    from torch.profiler import record_function

    a, b = torch.randn(8, 16), torch.randn(16, 4)

    def f():
        with record_function("outer"):
            with record_function("inner"):
                c = a @ b
            return c.relu()

    g = opgraph.record(f)
    assert [(op.labels, op.flops) for op in g.ops] == [(("outer", "inner"), 2 * 8 * 16 * 4), (("outer",), 0)]


def slope(model, mode, lengths=(8, 16, 24, 32)):
    depth = [measure.graph_metrics(cases.build("depth", {"model": model, "preset": "tiny", "mode": mode,
                                                        "seq_len": n, "device": "cpu"}))["sequential_depth"]
             for n in lengths]
    return np.polyfit(lengths, depth, 1)[0], depth


def test_the_rnn_depth_grows_linearly_in_n_and_the_transformer_forward_does_not_grow():
    rnn, rnn_depth = slope("rnn-width", "forward")
    tf, tf_depth = slope("transformer", "forward")
    assert rnn > 1 and np.allclose(np.diff(rnn_depth), np.diff(rnn_depth)[0])  # exactly linear: a fixed cost a step
    assert tf == pytest.approx(0, abs=1e-9) and len(set(tf_depth)) == 1


@pytest.mark.parametrize("model", ["transformer", "rnn-width"])
def test_generation_depth_grows_with_the_output_length(model):
    assert slope(model, "generate")[0] > 1


@pytest.mark.parametrize("model", ["transformer", "rnn-width"])
@pytest.mark.parametrize("mode", cases.MODES)
def test_counted_matmul_flops_of_the_executed_graph_equal_the_analytic_model(model, mode):
    m = measure.graph_metrics(cases.build("depth", {"model": model, "preset": "tiny", "mode": mode, "seq_len": 6,
                                                    "device": "cpu"}))
    assert m["counted_matmul_flops"] == m["matmul_flops"] > 0
