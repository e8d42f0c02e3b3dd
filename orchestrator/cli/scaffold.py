"""`orchestrator init DIR`: a new project that checks, runs and tests with no key.

The files come from `orchestrator/templates/project` (package data). The one
file a template cannot hold is the example cassette: its request bodies are
what this version of the runtime and LiteLLM send, so it is recorded here, by
running the example conversation on the scripted turns of `tests/recorded.py`.
"""

from __future__ import annotations

import asyncio
import re
import runpy
import shutil
from importlib import resources
from pathlib import Path

__all__ = ["ScaffoldError", "bundled_project", "init_project", "project_name"]

_RENAMES = {"gitignore.txt": ".gitignore"}  # a `.gitignore` inside the package would hide files from git
_RENDERED = {"README.md", "pyproject.toml"}
EXAMPLE_CASSETTE = Path("tests/cassettes/test_agents/test_replays_a_recorded_conversation.json")


class ScaffoldError(Exception):
    """The target directory cannot take a new project; the message says what to do."""


def bundled_project() -> Path:
    """The examples shipped inside the package (agents/, configs/, cassettes/): what `run` uses in an empty folder."""
    return Path(str(resources.files("orchestrator") / "bundled"))


def init_project(target: Path, *, force: bool = False) -> list[Path]:
    """Write the project into `target` and record its example cassette; returns the files written."""
    if target.exists() and not target.is_dir():
        raise ScaffoldError(f"{target} exists and is not a directory")
    if target.exists() and any(target.iterdir()) and not force:
        raise ScaffoldError(f"{target} is not empty: choose a new directory, or pass --force to write into it anyway")
    template = Path(str(resources.files("orchestrator") / "templates" / "project"))
    written: list[Path] = []
    for source in sorted(template.rglob("*")):
        if source.is_dir() or "__pycache__" in source.parts:
            continue
        relative = source.relative_to(template)
        destination = target / relative.parent / _RENAMES.get(relative.name, relative.name)
        destination.parent.mkdir(parents=True, exist_ok=True)
        if relative.name in _RENDERED:
            destination.write_text(_render(source.read_text(encoding="utf-8"), target), encoding="utf-8")
        else:
            shutil.copyfile(source, destination)
        written.append(destination)
    written.append(asyncio.run(_record_example(target)))
    return written


def _render(text: str, target: Path) -> str:
    """A template with the project's name and the runtime version it needs (`pip install -e .` reads both)."""
    from orchestrator import __version__

    return text.replace("{name}", project_name(target)).replace("{version}", __version__)


def project_name(target: Path) -> str:
    """The folder's name as a valid distribution name (PEP 508): `pip install -e .` refuses any other."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", target.resolve().name).strip("-._")
    return name or "agents-project"


async def _record_example(target: Path) -> Path:
    """Run the example conversation on its scripted turns and record it where its test replays it."""
    import respx

    from orchestrator.runtime import Runtime
    from providers.cassette import Recorder
    from providers.scripted import ScriptedModel

    turns = runpy.run_path(str(target / "tests" / "recorded.py"))
    cassette = target / EXAMPLE_CASSETTE
    cassette.parent.mkdir(parents=True, exist_ok=True)
    router = respx.mock(assert_all_called=False)
    ScriptedModel(turns["RECORDED"]).mount(router)
    metadata = {"env": [], "test": "tests/test_agents.py::test_replays_a_recorded_conversation"}
    with router, Recorder(cassette, metadata=metadata):
        runtime = Runtime.from_path(
            target / "agents", config=target / "configs" / "default.yaml", storage=":memory:", model="recorded"
        )
        async with runtime:
            thread = await runtime.create_thread("weather_chat")
            await thread.send(turns["QUESTION"])
    return cassette
