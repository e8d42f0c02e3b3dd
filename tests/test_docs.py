"""The docs are true: their code runs, their YAML parses, their links stay inside the repo.

Every ```python block of README.md and docs/*.md runs, from the root of a
temporary copy of the repository with no API key (top-level `await` allowed),
unless the line before it is `<!-- doc-test: skip (why) -->`. Every ```yaml block
parses; one whose top-level keys are config sections is loaded as a config
(unless skipped). A relative link or `../` path never leaves the repository.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
_SKIP = re.compile(r"<!--\s*doc-test:\s*skip\b[^>]*-->\s*$")
_CONFIG_KEYS = {"providers", "models", "default_model", "runtime", "server"}
_RUNNER = """\
import ast, asyncio, sys
source = open(sys.argv[1], encoding="utf-8").read()
code = compile(source, sys.argv[2], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""


@dataclass(frozen=True)
class Block:
    file: Path
    line: int
    lang: str
    code: str
    skipped: bool

    @property
    def id(self) -> str:
        return f"{self.file.relative_to(REPO)}:{self.line}"


def _blocks(lang: str) -> list[Block]:
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            if match.group(1) != lang:
                continue
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            out.append(Block(doc, line, lang, match.group(2), bool(_SKIP.search(before))))
    return out


PYTHON = _blocks("python")
YAML = _blocks("yaml")


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("repo") / "repo"
    ignore = shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.db", "*.db-*", ".pytest_cache", ".hypothesis", "node_modules"
    )
    shutil.copytree(REPO, target, ignore=ignore)
    return target


def test_the_docs_have_blocks_to_test() -> None:
    assert len([b for b in PYTHON if not b.skipped]) >= 4 and len(YAML) >= 3


@pytest.mark.parametrize("block", [b for b in PYTHON if not b.skipped], ids=lambda b: b.id)
def test_python_block_runs(block: Block, repo_copy: Path, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    runner = tmp_path / "runner.py"
    runner.write_text(_RUNNER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN")) and not k.startswith("AWS_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    done = subprocess.run(
        [sys.executable, str(runner), str(script), block.id],
        cwd=repo_copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("block", YAML, ids=lambda b: b.id)
def test_yaml_block_parses_and_configs_validate(block: Block, repo_copy: Path, tmp_path: Path) -> None:
    import orchestrator.core.settings  # noqa: F401 - registers the runtime section's checks
    from providers.config import load_config

    try:
        data = yaml.safe_load(block.code)
    except yaml.YAMLError as exc:
        pytest.fail(f"{block.id}: invalid YAML: {exc}")
    if block.skipped or not isinstance(data, dict) or not set(data) <= _CONFIG_KEYS:
        return
    path = tmp_path / "config.yaml"
    path.write_text(block.code, encoding="utf-8")
    cwd = os.getcwd()
    os.chdir(repo_copy)  # offline models name files relative to the working directory
    try:
        load_config(path)
    finally:
        os.chdir(cwd)


def test_the_commented_configs_parse() -> None:
    """configs/*.yaml show optional providers as comments; uncommented, they are valid YAML."""
    for config in (REPO / "configs").glob("*.yaml"):
        for number, line in enumerate(config.read_text(encoding="utf-8").splitlines(), 1):
            body = line.strip().removeprefix("#").strip()
            if line.strip().startswith("#") and re.match(r"^[a-z_]+:\s*\{", body):
                try:
                    yaml.safe_load(body)
                except yaml.YAMLError as exc:
                    pytest.fail(f"{config}:{number}: commented config is not valid YAML: {exc}")


_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_PARENT_PATH = re.compile(r"(?<![\w.])((?:\.\./)+[\w./-]+)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(REPO)))
def test_docs_point_only_inside_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    targets = [m for m in _LINK.findall(text) if "://" not in m and not m.startswith("mailto:")]
    targets += _PARENT_PATH.findall(text)
    for target in targets:
        resolved = (doc.parent / target).resolve()
        assert resolved.is_relative_to(REPO), f"{doc.name} points outside the repository: {target}"
        assert resolved.exists(), f"{doc.name} links to a missing file: {target}"


_FOLDER = re.compile(r"^(\S+/)(?:\s|$)")
_ENTRY = re.compile(r"^  (\S+\.py)(?:\s|$)")


def _listed_modules(architecture: str) -> list[str]:
    """Every `folder/name.py` the Modules section of docs/architecture.md lists (a folder line, then its entries)."""
    section = architecture.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    listed = []
    for block in re.findall(r"^```\n(.*?)^```", section, re.S | re.M):
        folder = ""
        for line in block.splitlines():
            if match := _FOLDER.match(line):
                folder = match.group(1)
            elif (match := _ENTRY.match(line)) and folder:
                listed.append(folder + match.group(1))
    return listed


def test_the_architecture_lists_every_module_and_only_those() -> None:
    """docs/architecture.md stays true: a module added, moved or removed fails here until the list says so."""
    from test_layers import _modules

    actual = {str(path.relative_to(REPO)) for path in _modules().values()}
    listed = _listed_modules((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert len(listed) == len(set(listed)), f"listed twice: {sorted(m for m in listed if listed.count(m) > 1)}"
    assert not actual - set(listed), f"modules docs/architecture.md does not list: {sorted(actual - set(listed))}"
    assert not set(listed) - actual, f"listed in docs/architecture.md but gone: {sorted(set(listed) - actual)}"


def test_testing_agents_examples_run_as_written_in_a_new_project(tmp_path: Path) -> None:
    """docs/testing-agents.md, read top to bottom in a project `orchestrator init` made: each ```python block
    whose first line names a test file (`# tests/test_x.py`) is written there, and each ```bash block (unless
    skipped) runs there, line by line, with no key. Before, its first example could not be recorded offline,
    did not match the shipped cassette and asserted a value no tool sets."""
    from orchestrator.cli.scaffold import init_project

    doc = REPO / "docs" / "testing-agents.md"
    project = tmp_path / "myproj"
    init_project(project)
    blocks = sorted(
        (b for b in (*_blocks("python"), *_blocks("bash")) if b.file == doc and not b.skipped), key=lambda b: b.line
    )
    env = {
        k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN")) and not k.startswith("PYTEST_")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    written, ran = 0, 0
    for block in blocks:
        named = re.match(r"# (tests/\S+\.py)\n", block.code)
        if block.lang == "python" and named:
            (project / named.group(1)).write_text(block.code, encoding="utf-8")
            written += 1
        for line in block.code.splitlines() if block.lang == "bash" else ():
            command = line.split("  #", 1)[0].strip()
            if not command or command.startswith("#"):
                continue
            assert command.startswith("pytest"), f"{block.id}: only pytest commands run here: {command}"
            argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *command.split()[1:]]
            done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{block.id}: {command}:\n{done.stdout}\n{done.stderr}"
            ran += 1
    assert written >= 2 and ran >= 4, "docs/testing-agents.md lost its examples"
    cassettes = project / "tests" / "cassettes"
    offline = json.loads((cassettes / "test_weather" / "test_weather_chat_calls_its_tool.json").read_text())
    assert offline["interactions"] == []  # the `test` model answers in process
    scripted = json.loads((cassettes / "test_weather_scripted" / "test_weather_in_oslo.json").read_text())
    assert len(scripted["interactions"]) == 2
