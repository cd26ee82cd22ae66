"""Two versions of the models timed in the same moments, each in a worker process: the gate's, the pairs' and
the history's measurement."""
