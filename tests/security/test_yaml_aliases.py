"""Attack: YAML aliases in every file the project reads (issue 43, item 5).

Configs refused aliases since issue 15, but eval suites and offline model scripts
(`orchestrator run --model turns.yaml`) were read with `yaml.safe_load`: 633 bytes of aliases
took 2.96 GB once walked. Every YAML file now goes through one loader
(`providers.yaml_source.parse_yaml`): aliases are refused, except in eval scripts, whose
documented anchors may stand while the document with its aliases written out stays small.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.eval.sources import load_script as load_eval_script
from orchestrator.eval.suite import load_suite
from providers.config import config_from_dict, load_config
from providers.offline import describe_answerer, load_script

ROOT = Path(__file__).resolve().parents[2]


def _bomb(levels: int) -> str:
    """`levels` lines, each alias list 9 times the one before: 9**levels strings once written out."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


SUITE = "agent: support_demo\nscenarios:\n  - id: one\n    checks: [{no_tool_call: end_chat}]\n"
OFFLINE_SCRIPT = "turns:\n  - text: hello\n"
EVAL_SCRIPT = "scenarios:\n  one:\n    a: [{text: hi}]\n"


def _suite(path: Path) -> Any:
    return load_suite(path)


def _offline(path: Path) -> Any:
    return load_script(path)


def _model_flag(path: Path) -> Any:
    """What `--model turns.yaml` does with the file."""
    config = config_from_dict({"providers": {}, "models": {}})
    return config.add_offline_model(str(path))


def _eval_script(path: Path) -> Any:
    return load_eval_script(path)


READERS: list[tuple[str, str, Callable[[Path], Any]]] = [
    ("suite.yaml", SUITE, _suite),
    ("turns.yaml", OFFLINE_SCRIPT, _offline),
    ("turns.yaml", OFFLINE_SCRIPT, _model_flag),
    ("script.yaml", EVAL_SCRIPT, _eval_script),
]


@pytest.mark.parametrize(("name", "good", "read"), READERS, ids=["suite", "offline", "--model", "eval-script"])
def test_an_alias_bomb_is_refused_unexpanded_naming_the_file_and_line(
    tmp_path: Path, name: str, good: str, read: Callable[[Path], Any]
) -> None:
    path = tmp_path / name
    path.write_text(good + _bomb(6), encoding="utf-8")  # 9**6 = 531,441 strings; the attack's 9 levels: 387 M
    tracemalloc.start()
    try:
        with pytest.raises(Exception) as refused:
            read(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(refused.value)
    assert str(path) in message and "line " in message, message
    assert "aliases (*name) are not allowed" in message or "aliases written out" in message, message
    assert peak < 20 * 1024 * 1024, peak


@pytest.mark.parametrize(("name", "good", "read"), READERS[:3], ids=["suite", "offline", "--model"])
def test_even_one_alias_is_refused_where_the_file_kind_has_no_use_for_it(
    tmp_path: Path, name: str, good: str, read: Callable[[Path], Any]
) -> None:
    path = tmp_path / name
    path.write_text("x-shared: &s hello\n" + good.replace("hello", "*s").replace("end_chat", "*s"), encoding="utf-8")
    with pytest.raises(Exception, match=r"aliases \(\*name\) are not allowed"):
        read(path)


def test_the_shipped_eval_script_with_its_anchors_still_loads() -> None:
    script = load_eval_script(ROOT / "evals/support_demo.script.yaml")
    assert script is not None


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text("shared:\n  loop: &l [1, *l]\n" + EVAL_SCRIPT, encoding="utf-8")
    with pytest.raises(Exception, match="holds it"):
        load_eval_script(path)


CONFIG = "providers: {}\n"


@pytest.mark.parametrize(
    ("name", "good", "read"),
    [*READERS, ("config.yaml", CONFIG, load_config)],
    ids=["suite", "offline", "--model", "eval-script", "config"],
)
def test_yaml_nested_too_deep_to_read_is_an_error_naming_the_file(
    tmp_path: Path, name: str, good: str, read: Callable[[Path], Any]
) -> None:
    path = tmp_path / name
    path.write_text(good + "deep: " + "[" * 5_000 + "]" * 5_000 + "\n", encoding="utf-8")
    with pytest.raises(Exception) as refused:
        read(path)
    assert not isinstance(refused.value, RecursionError)
    assert str(path) in str(refused.value) and "too deeply" in str(refused.value)


def test_describe_answerer_reports_the_refusal_for_a_config(tmp_path: Path) -> None:
    path = tmp_path / "turns.yaml"
    path.write_text(OFFLINE_SCRIPT + _bomb(3), encoding="utf-8")
    problem = describe_answerer(str(path))
    assert problem is not None and "aliases (*name) are not allowed" in problem


def test_the_servers_tokens_file_refuses_aliases(tmp_path: Path) -> None:
    from orchestrator.server.cli import serve

    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("a: &u alice\nb: *u\n", encoding="utf-8")
    result = CliRunner().invoke(serve, ["--tokens-file", str(tokens), "--path", str(ROOT / "agents")])
    assert result.exit_code != 0 and "aliases (*name) are not allowed" in result.output, result.output
