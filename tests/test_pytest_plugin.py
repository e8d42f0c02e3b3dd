"""The pytest plugin, used as a stranger would: an example project of its own, run by pytest in a subprocess.

tests/fixtures/example_project has its agents, config and tests, and uses only
the public plugin (auto-registered by the package's pytest11 entry point). Its
model is the scripted one (OpenAI-wire SSE served by respx, read by the
runtime's wire reader) while recording; the cassette serves the same bytes on
replay. No asyncio_mode is set there: the tests carry pytest-asyncio's and
anyio's markers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent / "fixtures" / "example_project"
KEY = "weather-key-0123456789abcdef"


def _pytest(project: Path, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "WEATHER_"))}
    if key is not None:
        env["WEATHER_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    target = tmp_path / "project"
    shutil.copytree(EXAMPLE, target)
    return target


@pytest.mark.slow
def test_record_replay_explain_and_block_as_a_user_would(project: Path) -> None:
    """One project through its life (each step is a pytest run in a subprocess, so they share one test)."""
    cassette_file = project / "tests" / "cassettes" / "test_weather" / "test_weather.json"
    missing = _pytest(project, "tests/test_weather.py::test_weather")
    assert missing.returncode == 1
    assert (
        "no cassette at" in missing.stdout
        and 'pytest "tests/test_weather.py::test_weather" --record-mode=once' in missing.stdout
    )

    recorded = _pytest(project, "tests/test_weather.py::test_weather", "--record-mode=once", key=KEY)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    text = cassette_file.read_text()
    assert KEY not in text
    cassette = json.loads(text)
    assert cassette["metadata"]["env"] == ["WEATHER_API_KEY"] and len(cassette["interactions"]) == 2

    again = _pytest(project, "tests/test_weather.py::test_weather", "--record-mode=new_episodes", key=KEY)
    assert again.returncode == 0, again.stdout
    assert json.loads(cassette_file.read_text())["interactions"] == cassette["interactions"]

    replayed = _pytest(project, "-rA")  # no key in the environment, no asyncio_mode, record mode none
    out = replayed.stdout
    assert "PASSED tests/test_weather.py::test_weather" in out, out
    assert "PASSED tests/test_weather.py::test_weather_under_anyio" in out, out
    assert "FAILED tests/test_weather.py::test_a_request_that_leaves_the_machine" in out, out
    assert "a request to api.weather.example left the machine" in out
    assert (
        'Record it with: pytest "tests/test_weather.py::test_a_request_that_leaves_the_machine" --record-mode=once'
        in out
    )

    tool = project / "agents" / "tools" / "get_weather.py"
    tool.write_text(tool.read_text().replace("Current weather for a city", "The weather in a city, now"))
    changed = _pytest(project, "tests/test_weather.py::test_weather")
    out = changed.stdout
    assert changed.returncode == 1
    assert "request 1 of 2" in out and "$.tools[0].function.description" in out
    assert "expected 'Current weather for a city', got 'The weather in a city, now'" in out
    assert "likely cause: tool 'get_weather': its description or argument schema changed" in out
    assert 'pytest "tests/test_weather.py::test_weather" --record-mode=all' in out
    # the mismatch is the failure, first and whole: not LiteLLM's APIConnectionError and the chain below it
    failure = _failure_section(out, "test_weather")
    assert failure[0].startswith("CassetteMismatch in tests/cassettes/test_weather/test_weather.json: "), failure
    assert len(failure) <= 4 and "APIConnectionError" not in out and "During handling" not in out, out


LOW_LEVEL = """
import socket

import httpx
import pytest

from providers.cassette import Cassette, Interaction, RecordedRequest, RecordedResponse

looked_up = []


def _no_network(host, *args, **kwargs):
    looked_up.append(host)
    raise OSError(f"this test has no network (looked up {host})")


socket.getaddrinfo = _no_network
CASSETTE = Cassette(
    interactions=[
        Interaction(
            request=RecordedRequest(method="POST", url="https://api.model.example/v1/chat", body={"q": "hi"}),
            response=RecordedResponse(status=200, body="ok"),
        )
    ]
)


def test_a_host_outside_the_cassette(replay_cassette):
    replay_cassette(CASSETTE)
    try:
        httpx.get("https://elsewhere.example/data")
    except BaseException as exc:
        caught = exc
    assert type(caught).__name__ == "ModelRequestBlocked", repr(caught)
    assert looked_up == []


def test_a_body_the_cassette_does_not_hold(replay_cassette):
    replay_cassette(CASSETTE)
    httpx.post("https://api.model.example/v1/chat", json={"q": "bye"})
"""


def test_the_low_level_fixture_closes_the_network_and_says_a_mismatch_first(tmp_path: Path) -> None:
    """`replay_cassette` (registered by the same plugin): a host the cassette does not hold is refused before any
    name lookup (before: passed through to the network), and a mismatch is the failure message, in a few lines."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_low_level.py").write_text(LOW_LEVEL)
    run = _pytest(tmp_path, "tests/test_low_level.py")
    out = run.stdout
    assert run.returncode == 1, out
    refused = _failure_section(out, "test_a_host_outside_the_cassette")
    assert refused[0].startswith("tests/test_low_level.py::test_a_host_outside_the_cassette: a request to "), out
    assert "elsewhere.example left the machine while replaying a cassette" in refused[0]
    mismatch = _failure_section(out, "test_a_body_the_cassette_does_not_hold")
    assert mismatch[0] == (
        "CassetteMismatch: interaction #1 (request 1 of 1) (POST https://api.model.example/v1/chat): "
        "request body differs at $.q: expected 'hi', got 'bye'"
    ), out
    assert len(mismatch) <= 4, out


def _failure_section(out: str, test: str) -> list[str]:
    """The lines pytest prints for `test`'s failure (or error), between its header and the next one."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("_") and test in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(("_", "=")))
    return lines[start + 1 : end]
