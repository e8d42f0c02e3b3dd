"""Executions across machines on Temporal (optional: `pip install 'orchestrator-runtime[temporal]'`).

One workflow per thread keeps its requests (run, send) in order and durable;
each request runs as an activity that calls the executor. `ThreadRequests` is
the server's side, `orchestrator.temporal.worker.Worker` the workers'. See
docs/deployment.md.
"""

from orchestrator.temporal.client import TemporalOptions, TemporalUnavailable, ThreadRequests, connect

__all__ = ["TemporalOptions", "TemporalUnavailable", "ThreadRequests", "connect"]
