"""Pytest fixtures for replaying cassettes.

Enable with `pytest_plugins = ["providers.pytest_plugin"]`, then::

    def test_x(replay_cassette):
        replayer = replay_cassette("tests/cassettes/x.json")
        ...  # provider requests are now served from the cassette

Other mocks (respx routers for unrelated hosts) must start before the replay:
the replay router passes every host it does not know through to the network.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from providers.cassette import Cassette, Replayer


@pytest.fixture
def replay_cassette() -> Iterator[Callable[[str | Path | Cassette], Replayer]]:
    """Factory: start replaying a cassette until the test ends; mismatches fail the test."""
    active: list[Replayer] = []

    def start(path: str | Path | Cassette) -> Replayer:
        replayer = Replayer(path)
        replayer.start()
        active.append(replayer)
        return replayer

    yield start
    for replayer in reversed(active):
        replayer.stop()
    for replayer in active:
        if replayer.mismatch is not None:
            raise replayer.mismatch
