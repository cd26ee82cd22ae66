"""Timing one case's method (torch.utils.benchmark, rounds, achieved FLOP/s) and a GPU's telemetry while it runs."""
