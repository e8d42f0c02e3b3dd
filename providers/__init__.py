"""Model access: YAML config, the LiteLLM client, recording and replay.

Nothing here imports `orchestrator` internals; LiteLLM loads on first call.
"""
