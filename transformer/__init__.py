"""attention-bench's models: "Attention Is All You Need" from its equations, and the RNN baseline it replaced."""

from .attention import BACKENDS, causal_mask, scaled_dot_product_attention
from .layers import FeedForward, PositionalEncoding, sinusoidal_positional_encoding
from .model import PRESETS, Transformer, TransformerConfig
from .multihead import STRATEGIES, MultiHeadAttention
from .rnn_attention import (
    RNN_PRESETS,
    AdditiveAttention,
    RecurrentLayer,
    RNNAttention,
    RNNAttentionConfig,
    parameter_count,
)

__all__ = ["BACKENDS", "causal_mask", "scaled_dot_product_attention", "FeedForward", "PositionalEncoding",
           "sinusoidal_positional_encoding", "PRESETS", "Transformer", "TransformerConfig", "STRATEGIES",
           "MultiHeadAttention", "RNN_PRESETS", "AdditiveAttention", "RecurrentLayer", "RNNAttention",
           "RNNAttentionConfig", "parameter_count"]
