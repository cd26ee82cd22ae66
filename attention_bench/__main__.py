"""``python -m attention_bench``: the same as ``attention-bench`` (torchrun starts it this way)."""

import sys

from .cli import main

sys.exit(main())
