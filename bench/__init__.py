"""Benchmarks: this runtime against the frameworks its users would pick instead.

Run the suite with `python -m bench` (or `python bench/run.py`); `--quick`
for a short run. Peer frameworks come from the `bench` extra, never from the
runtime's own dependencies.
"""
