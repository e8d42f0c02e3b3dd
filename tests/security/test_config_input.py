"""Attack: config files (issue 15, item 8).

A YAML alias bomb grew `orchestrator run` to 2.6 GB and hung (`yaml.safe_load`
keeps aliases, and walking the result expands them); a config that is not
UTF-8 ended in a raw `UnicodeDecodeError`. Aliases are now refused (a config
never needs one) and a non-UTF-8 file is a `ConfigError` naming it.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from providers.config import ConfigError, load_config

GOOD = """\
providers:
  openai: {api_key: "${OPENAI_API_KEY}"}
models:
  m: {provider: openai, model: gpt-4o-mini}
default_model: m
"""


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return GOOD + "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_without_expanding(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(), encoding="utf-8")
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as refused:
            load_config(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(refused.value)
    assert str(path) in message and "line 7" in message and "aliases" in message
    assert peak < 20 * 1024 * 1024  # 9**9 strings were never made


def test_merge_key_alias_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text(
        GOOD.replace("models:\n", "base: &base {provider: openai}\nmodels:\n  n: {<<: *base, model: x}\n"),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="aliases"):
        load_config(path)


def test_anchor_without_alias_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "anchor.yaml"
    path.write_text(GOOD.replace("default_model: m", "default_model: &d m"), encoding="utf-8")
    assert load_config(path).default_model == "m"


@pytest.mark.parametrize("raw", [b"\xe9t\xe9: 1\n", b"\xff\xfe\x00\x00", "models: {}\n".encode("utf-16")])
def test_config_that_is_not_utf8_is_a_config_error_naming_the_file(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes(GOOD.encode() + raw)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(path) in str(refused.value) and "UTF-8" in str(refused.value)


def test_run_with_an_alias_bomb_fails_fast_with_the_file_named(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from orchestrator.cli.main import main

    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(), encoding="utf-8")
    root = Path(__file__).resolve().parents[2]
    result = CliRunner().invoke(main, ["run", "support_demo", "--path", str(root / "agents"), "--config", str(path)])
    assert result.exit_code != 0
    text = result.output + (str(result.exception) if result.exception else "")
    assert str(path) in text and "aliases" in text


def test_tokens_file_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from orchestrator.server.cli import serve

    path = tmp_path / "tokens.yaml"
    path.write_bytes(b"t\xe9ken: alice\n")
    result = CliRunner().invoke(serve, ["--tokens-file", str(path)])
    assert result.exit_code == 2 and "not UTF-8" in result.output
