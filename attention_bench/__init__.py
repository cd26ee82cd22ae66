"""attention-bench's command line (``attention-bench``, or ``python -m attention_bench``): ``cli`` parses and
dispatches, ``options`` defines the shared flags once, ``measuring`` and ``reporting`` hold the commands."""
