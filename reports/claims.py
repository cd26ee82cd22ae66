"""The claims the suite tests, in its own words, with where the paper (or RNNsearch) states them and the
report section that answers each with data. The report's head and docs/CLAIMS.md show this list."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    key: str
    claim: str
    source: str
    measured: str
    sections: tuple[str, ...]


CLAIMS = (
    Claim("C1", "An RNN reads a sentence one token after another (10 words, 10 dependent steps), so it is hard to "
                "parallelise; a Transformer reads all tokens at once.",
          "Vaswani et al. 2017, section 4 and Table 1 (sequential operations O(n) vs O(1))",
          "time against sequence length and model size for both models on the same tokens, each Transformer/RNN "
          "time ratio split into FLOP ratio and FLOP/s ratio; the operators on the critical path of the executed "
          "graph (sequential depth) against n; greedy generation; speed-up over CPU threads",
          ("c1_length", "c1_generation", "c1_depth", "c1_threads")),
    Claim("C2", "Attention is matrix multiplication, which CPUs and GPUs run best, and the larger both dimensions, "
                "the more efficient: analysing many words at once pays.",
          "Vaswani et al. 2017, section 3.2.1 (dot-product attention is fast with optimised matmul code)",
          "achieved matmul FLOP/s of equation (1) against sequence length, as a fraction of the machine's own "
          "measured GEMM peak; each backend's best fraction of the GEMM's rate timed beside it, paired, with glibc's "
          "allocator fixed (the kernels' own rates; the grid's curves carry the default allocator's page faults)",
          ("c2_roofline",)),
    Claim("C3", "The h heads are independent, so they parallelise trivially; concatenation is free when each head "
                "writes at its offset.",
          "Vaswani et al. 2017, section 3.2.2", "heads batched in one kernel vs one at a time vs the fused kernel; "
          "which component's time grows with h; the heads split over ranks with torch.distributed, strong and "
          "weak scaling and the communication's share", ("c3_heads", "c3_parallel")),
    Claim("C4", "One large attention and many small heads cost the same FLOPs; multi-head even adds a linear layer "
                "(W_O), so it costs more.",
          "Vaswani et al. 2017, section 3.2.2 (“the total computational cost is similar”) and Table 3 row (A)",
          "matmul FLOPs per component, analytic and counted, at fixed d_model for h = 1..64; what does grow with "
          "h (softmax work, h·n² score memory, launches); a head with and without W_O", ("c3_heads",)),
    Claim("C5", "Scores are divided by sqrt(d_k) because that keeps the softmax out of saturation and training "
                "stable.", "Vaswani et al. 2017, section 3.2.1 (footnote 4)",
          "largest softmax probability, entropy and Jacobian norm against d_k, with and without the scale",
          ("c5_scaling",)),
    Claim("C6", "Self-attention sees every position at once, so the decoder needs a causal mask: future positions "
                "get probability 0.", "Vaswani et al. 2017, section 3.2.3",
          "tests: changing future tokens never changes earlier outputs; masked vs unmasked attention cost", ()),
    Claim("C7", "Sinusoidal positional encoding stays bounded while making every position distinct.",
          "Vaswani et al. 2017, section 3.5", "tests: values in [-1, 1], distinct rows, the formula", ()),
    Claim("C8", "Each sub-layer is followed by Add & Norm; the encoder output is the K and V of the decoder's "
                "cross-attention, the decoder state its Q.", "Vaswani et al. 2017, section 3.1 and figure 1",
          "tests: the model equals torch.nn.Transformer on the same weights", ()),
    Claim("C9", "Bahdanau attention recomputes a context vector at every decoder step from all encoder states: "
                "e_ij = v_aᵀ tanh(W_a s_(i-1) + U_a h_j), softmax over j.",
          "Bahdanau et al. 2015, section 3.1 and appendix A",
          "the RNN baseline itself (bidirectional GRU encoder, GRU decoder, additive attention step by step)", ()),
    Claim("Table 1", "Self-attention costs O(n²·d) per layer against a recurrent layer's O(n·d²), so it is cheaper "
                     "when n < d; it needs O(1) sequential operations against O(n).",
          "Vaswani et al. 2017, Table 1 and section 4",
          "matmul FLOPs and time of a self-attention layer and a GRU layer over n and d; their crossovers",
          ("table1",)),
)


def markdown() -> str:
    """docs/CLAIMS.md: the claims as a Markdown page (a test keeps the file equal to this)."""
    lines = ["# The claims attention-bench tests", "",
             "Each claim below comes from \"Attention Is All You Need\" (Vaswani et al. 2017) or from the "
             "RNN-attention model it replaced (RNNsearch, Bahdanau et al. 2015), as lectures on the Transformer "
             "teach them. The suite turns each into a measurement; the report (`attention-bench run`) opens with "
             "this list and answers each in its own section (the anchor in the last column).", "",
             "Generated from `reports/claims.py` by `attention-bench claims > docs/CLAIMS.md`.", "",
             "| claim | in the project's words | where stated | what is measured | report section |",
             "|---|---|---|---|---|"]
    for c in CLAIMS:
        sections = ", ".join(f"`#{s}`" for s in c.sections) or "tests only"
        lines.append(f"| {c.key} | {c.claim} | {c.source} | {c.measured} | {sections} |")
    return "\n".join(lines) + "\n"
