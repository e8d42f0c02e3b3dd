"""Checks on what a thread did, and the pytest plugin that runs them against your agents."""
