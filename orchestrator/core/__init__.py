"""Plain values every layer shares: messages, tool results, event payloads, settings, logs."""
