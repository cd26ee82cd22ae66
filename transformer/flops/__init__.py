"""An exact analytic FLOP model of every module in this package, and a counter to check it against.

Conventions (the field's: FlashAttention, TorchBench, Kaplan et al. 2020): a multiply-add is 2 FLOPs; a matmul
(m x k)(k x n) is 2*m*n*k. Every function returns a ``Flops`` with a ``forward`` and a ``backward`` ``Breakdown``, each
keeping matmul FLOPs (per component: projections, scores, weights*V, FFN, GRU gates, ...) apart from
the elementwise rest (softmax, masking, LayerNorm, residuals, biases, ...).

Matmul FLOPs are exact: they are what ``count`` measures with torch.utils.flop_counter.FlopCounterMode,
for every module and strategy, forward and backward, and the tests hold them equal. The backward of a
matmul C = A B costs one matmul per operand that needs a gradient (parameters always do; a module's
raw inputs only if they require grad, hence ``inputs_require_grad``). The fused SDPA kernels recompute
the scores in their backward, so their backward counts 5 attention matmuls where the written-out
equation's autograd counts 4.

Elementwise FLOPs have no counter to check them: torch's counter sees only matmuls, convolutions and
the SDPA kernels (softmax, LayerNorm and all elementwise work count 0 there). They follow the
per-element costs in ``ELEMENTWISE`` (a transcendental counts 1), a convention stated once here.
Dropout and embedding lookups are memory operations and count 0.

Where torch's counter sees less than the model without this module: it has no formula for the CPU
fused attention kernel (``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward), so it
counts 0 for them; ``count`` registers the GPU kernels' formulas for them. The eval-mode fast paths of
torch's own nn.MultiheadAttention and nn.TransformerEncoderLayer (``_native_multi_head_attention``,
``_transformer_encoder_layer_fwd``) still count 0: count torch's modules in train mode. On a GPU,
nn.GRU runs as one cuDNN op that the counter does not see (0 FLOPs); on the CPU it decomposes into
the matmuls counted here.
"""

from .attention_flops import attention, causal_pairs, multi_head_attention, sdpa_recomputes, useful_attention_flops
from .counter import Counted, count, register_cpu_sdpa_formulas
from .encoder_decoder import transformer, transformer_generate
from .rnn import recurrent_layer, rnn_attention, rnn_attention_generate
from .tally import ELEMENTWISE, Breakdown, Flops

__all__ = ["ELEMENTWISE", "Breakdown", "Flops", "attention", "causal_pairs", "multi_head_attention",
           "sdpa_recomputes", "useful_attention_flops", "transformer", "transformer_generate", "recurrent_layer",
           "rnn_attention", "rnn_attention_generate", "Counted", "count", "register_cpu_sdpa_formulas"]
