"""Where the time goes: torch.profiler breakdowns in the paper's components, and the matrix products a call
executes replayed alone (the floor of a speed target)."""
