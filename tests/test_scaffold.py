"""`orchestrator init` and the examples bundled in the package (scripts/wheel_check.sh does the same from a wheel)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.cli.scaffold import EXAMPLE_CASSETTE, ScaffoldError, bundled_project, init_project


def test_init_writes_a_project_with_a_recorded_example(tmp_path: Path) -> None:
    target = tmp_path / "weather"
    result = CliRunner().invoke(main, ["init", str(target)])
    assert result.exit_code == 0, result.output
    for name in (
        "agents/tools/lookup_weather.py",
        "agents/agents/weather_sim.py",
        "configs/default.yaml",
        "tests/test_agents.py",
        ".gitignore",
        "README.md",
        "pyproject.toml",
    ):
        assert (target / name).is_file(), name
    assert 'name = "weather"' in (target / "pyproject.toml").read_text()
    cassette = json.loads((target / EXAMPLE_CASSETTE).read_text())
    assert len(cassette["interactions"]) == 2
    config = (target / "configs" / "default.yaml").read_text()
    assert "${OPENAI_API_KEY}" in config and "default_model: test" in config

    checked = CliRunner().invoke(main, ["check", str(target / "agents")])
    assert checked.exit_code == 0 and "no problems" in checked.output


def test_init_refuses_a_folder_that_is_not_empty_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="is not empty.*--force"):
        init_project(tmp_path)
    refused = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert refused.exit_code == 1 and "--force" in refused.output
    assert init_project(tmp_path, force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_run_in_an_empty_folder_uses_the_bundled_examples(tmp_path: Path) -> None:
    assert (bundled_project() / "agents" / "agents" / "support_demo.py").is_file()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, ["run", "support_demo"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    assert "running the examples bundled with the package" in result.output
    assert "end_conversation" in result.output
