"""The report's analyses: pure functions from the tidy table to numbers, tables, figures and a verdict.

``base`` holds the ``Analysis`` and ``Figure`` types and the helpers every analysis shares; ``fits``,
``spread`` and ``runs`` the curve fits, how sure a ratio is and which rows are one run. One module per
question the report answers:

    c1_length      Transformer vs RNN-attention over sequence length and model size (C1)
    c1_generation  parallel teacher forcing vs sequential greedy generation (C1)
    c1_depth       sequential depth of the executed graph against n (C1)
    c1_threads     strong scaling over CPU threads (C1)
    c2_roofline    achieved FLOP/s against the measured GEMM peak (C2)
    c3_heads       one large attention vs many small heads, and W_O (C3/C4)
    c3_parallel    heads split over ranks (C3 beyond one device)
    c5_scaling     why scores are divided by sqrt(d_k) (C5)
    paired         the verdicts' ratios timed paired, and whether the grid's curves agree with them
    prediction     the performance model's predictions against the measured times
    table1         self-attention vs recurrent layer (Table 1)
    profiling      where the time goes, component by component
    hardware       the same cases on several machines
    noise          spread, unreplicated cases and how far two runs agree

Each module's analysis has the module's name as its key; ``registry`` lists them in the page's order and
runs them on one machine's latest run.
"""
