"""`orchestrator init` and the examples bundled in the package (scripts/wheel_check.sh does the same from a wheel)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.cli.scaffold import EXAMPLE_CASSETTE, ScaffoldError, bundled_project, init_project

REPO = Path(__file__).resolve().parents[1]


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


def _package_data_patterns() -> list[str]:
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return list(pyproject["tool"]["setuptools"]["package-data"]["orchestrator"])


def test_every_data_file_of_the_package_is_in_the_wheel() -> None:
    """Each file the package reads at run time that is not a module (and each template file, modules too)
    matches a package-data pattern: `serve --scripted demo` once failed from the wheel, its
    `server/demo_script.json` left out."""
    package = REPO / "orchestrator"
    included = {path for pattern in _package_data_patterns() for path in package.glob(pattern)}
    data = [
        path
        for path in package.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and "bundled" not in path.relative_to(package).parts  # links to agents/, configs/, cassettes/
        and (path.suffix != ".py" or "templates" in path.relative_to(package).parts)
    ]
    assert data and not [str(p.relative_to(package)) for p in data if p not in included]


def test_the_new_project_installs_its_test_dependencies_and_names_them() -> None:
    """`pip install -e '.[test]'` in a new project: a project, not a package (setuptools found two top-level
    packages, agents and configs, and refused); its test extra brings pytest and pytest-asyncio; it asks for
    the runtime version that made it; `init` says to install it before `pytest`."""
    import tomllib

    runner = CliRunner()
    with runner.isolated_filesystem():
        result = runner.invoke(main, ["init", "my proj"])
        assert result.exit_code == 0, result.output
        project = tomllib.loads(Path("my proj/pyproject.toml").read_text())
    from orchestrator import __version__

    assert project["project"]["name"] == "my-proj"
    assert project["project"]["dependencies"] == [f"orchestrator-runtime>={__version__}"]
    assert [d.split(">=")[0] for d in project["project"]["optional-dependencies"]["test"]] == [
        "pytest",
        "pytest-asyncio",
    ]
    assert project["tool"]["setuptools"]["packages"] == []
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    lines = [line.strip() for line in result.output.splitlines()]
    assert lines[1] == "cd 'my proj'"
    assert lines.index("pip install -e '.[test]'   # what the tests need: pytest, pytest-asyncio") < lines.index(
        "pytest"
    )


def test_setuptools_reads_the_new_project(tmp_path: Path) -> None:
    """What `pip install -e '.[test]'` asks of setuptools first (its metadata), offline: before, it refused
    with `Multiple top-level packages discovered in a flat-layout: ['agents', 'configs']`."""
    import subprocess
    import sys

    init_project(tmp_path / "proj")
    code = (
        "import sys; from setuptools import setup; "
        "sys.argv[1:] = ['-q', 'egg_info', '--egg-base', sys.argv[1]]; setup()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=tmp_path / "proj", capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    requires = (tmp_path / "proj.egg-info" / "requires.txt").read_text()
    assert "orchestrator-runtime>=" in requires and "[test]\npytest>=8\npytest-asyncio>=0.24" in requires
    assert (tmp_path / "proj.egg-info" / "top_level.txt").read_text().strip() == ""


def test_the_new_project_has_an_approved_tool_that_run_asks_for(tmp_path: Path) -> None:
    """`weather_mail`'s send_forecast needs approval: piped, the line after the message decides; with no
    line left the run ends at once (never a hang, never an approval nobody gave), the call waiting."""
    project = tmp_path / "proj"
    init_project(project)
    assert "needs_approval=True" in (project / "agents" / "tools" / "send_forecast.py").read_text()
    cwd = os.getcwd()
    os.chdir(project)
    try:
        approved = CliRunner().invoke(main, ["run", "weather_mail", "--model", "test"], input="Mail me\ny\n")
        left = CliRunner().invoke(main, ["run", "weather_mail", "--model", "test", "-m", "Mail me"], input="")
    finally:
        os.chdir(cwd)
    assert approved.exit_code == 0, approved.output
    assert "Approve? [y/n or a reason] y" in approved.output and "✓ send_forecast: forecast sent to" in approved.output
    assert left.exit_code == 0, left.output
    assert "no decision given (input ended)" in left.output and "Stopped: awaiting_approval" in left.output
    assert "forecast sent to" not in left.output


def test_the_new_projects_own_tests_pass(tmp_path: Path) -> None:
    """The project's tests (the approval ones among them) pass with no key, as `pytest` runs them there."""
    import subprocess
    import sys

    project = tmp_path / "proj"
    init_project(project)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
