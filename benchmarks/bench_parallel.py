"""Head-parallel attention over gloo ranks (claim C3 beyond one device), tracked per commit: the time of
one forward and the share of it spent in the collectives, on 1 and 2 ranks spawned by the benchmark."""

from .core.ranks import head_parallel


class HeadParallelAttention:
    """One head-parallel attention case (benchmarks.distributed) on 1 and on 2 CPU ranks, both combines."""

    area = head_parallel.AREA
    params = (["attention"], ["allreduce", "allgather"], [8], [128], [512], [4], [1, 2], ["gloo"], ["cpu"])
    param_names = ["layer", "combine", "heads", "seq_len", "d_model", "batch", "ranks", "backend", "device"]
    timeout = 300

    def setup(self, layer, combine, heads, seq_len, d_model, batch, ranks, backend, device):
        case = dict(layer=layer, combine=combine, heads=heads, seq_len=seq_len, d_model=d_model, batch=batch)
        self.metrics = head_parallel.spawn_measure(case, ranks)

    def track_time(self, *params):
        """Seconds per head-parallel forward (the slowest rank's median)."""
        return self.metrics["time_median_s"]

    track_time.unit = "s"

    def track_comm_share(self, *params):
        """The collectives' share of the forward's work: comm / (compute + comm), each timed alone in the same
        blocks (benchmarks.core.ranks.head_parallel), so it lies in (0, 1)."""
        return self.metrics["comm_share"]

    track_comm_share.unit = "fraction"
