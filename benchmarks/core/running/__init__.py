"""Sweeping a grid into a run folder: the runner (resumable, atomic records), its summary, the folder's lock."""
