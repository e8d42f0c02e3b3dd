"""The `orchestrator` command."""
