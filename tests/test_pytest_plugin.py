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
