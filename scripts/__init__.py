"""Measurement scripts, run as `python scripts/<name>.py`; a package only so that import-linter holds them to
the top layer (nothing imports them)."""
