"""The providers config: loading, merging, and errors that point at file, line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from providers.config import SCRIPTED_BASE_URL, ConfigError, config_from_dict, load_config

VALID = """\
providers:
  openai:
    api_key: ${OPENAI_API_KEY}
  anthropic: {api_key: "${ANTHROPIC_API_KEY}"}
  local: {type: openai, base_url: "http://localhost:11434/v1", api_key: none}
  demo: {type: scripted}
models:
  fast:
    provider: openai
    model: gpt-4o-mini
    fallbacks: [smart]
    retry: {attempts: 4, backoff: 0.25, max_wait: 10}
    timeout: 30
    params: {temperature: 0.2}
    price: {input: 0.15, output: 0.6}
  smart:
    provider: anthropic
    model: claude-sonnet-4-5
  llama: {provider: local, model: llama3.2}
  demo: {provider: demo, model: demo}
default_model: fast
"""


def write(tmp_path: Path, text: str, name: str = "providers.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    return str(info.value)


def test_valid_config_loads_with_models_and_infos(tmp_path):
    cfg = load_config(write(tmp_path, VALID))
    fast = cfg.models["fast"]
    assert fast.retry.attempts == 4 and fast.retry.max_wait == 10 and fast.timeout == 30
    assert fast.params == {"temperature": 0.2} and fast.price.output == 0.6
    info = cfg.model_info(None)
    assert (info.alias, info.provider, info.provider_type, info.model, info.dialect) == (
        "fast",
        "openai",
        "openai",
        "openai/gpt-4o-mini",
        "openai",
    )
    smart = cfg.model_info("smart")
    assert smart.model == "anthropic/claude-sonnet-4-5" and smart.dialect == "anthropic"
    assert cfg.model_info("llama").model == "openai/llama3.2"
    assert cfg.model_info("demo").model == "openai/demo"
    assert cfg.fallback_chain("fast") == ["fast", "smart"]


def test_unknown_alias_lists_known_aliases(tmp_path):
    cfg = load_config(write(tmp_path, VALID))
    with pytest.raises(ConfigError, match="unknown model alias 'nope'.*demo, fast, llama, smart"):
        cfg.model_info("nope")


def test_bad_yaml_names_file_and_line(tmp_path):
    msg = error_of(tmp_path, "providers:\n  openai:\n    api_key: a: b\nmodels: {}\n")
    assert "providers.yaml, line 3" in msg and "invalid YAML" in msg


def test_unknown_field_names_file_line_and_field(tmp_path):
    text = VALID.replace("    timeout: 30\n", "    timeout: 30\n    temprature: 0.1\n")
    msg = error_of(tmp_path, text)
    assert "providers.yaml, line 14" in msg
    assert "models.fast.temprature: unknown field" in msg


def test_wrong_type_names_file_line_and_field(tmp_path):
    msg = error_of(tmp_path, VALID.replace("attempts: 4", "attempts: many"))
    assert "providers.yaml, line 12" in msg and "models.fast.retry.attempts" in msg and "integer" in msg


def test_stream_setting_is_checked_and_resolved(tmp_path):
    msg = error_of(tmp_path, VALID.replace("api_key: none}", "api_key: none, stream: fast}"))
    assert "providers.yaml, line 5" in msg and "providers.local.stream" in msg and "'auto' or 'litellm'" in msg
    config = load_config(write(tmp_path, VALID.replace("api_key: none}", "api_key: none, stream: litellm}")))
    assert config.resolve_provider("local").stream == "litellm" and config.resolve_provider("demo").stream == "auto"


def test_unknown_fallback_alias(tmp_path):
    msg = error_of(tmp_path, VALID.replace("fallbacks: [smart]", "fallbacks: [smart, clever]"))
    assert "line 11" in msg and "models.fast.fallbacks.1" in msg and "unknown fallback alias 'clever'" in msg


def test_fallback_cycle(tmp_path):
    text = VALID.replace("    model: claude-sonnet-4-5\n", "    model: claude-sonnet-4-5\n    fallbacks: [fast]\n")
    msg = error_of(tmp_path, text)
    assert "fallback cycle: fast -> smart -> fast" in msg and "models.fast.fallbacks" in msg and "line 11" in msg


def test_unknown_provider(tmp_path):
    msg = error_of(tmp_path, VALID.replace("provider: anthropic", "provider: antropic"))
    assert "line 17" in msg and "models.smart.provider" in msg and "unknown provider 'antropic'" in msg


def test_default_model_not_defined(tmp_path):
    msg = error_of(tmp_path, VALID.replace("default_model: fast", "default_model: quick"))
    assert "line 21" in msg and "default_model" in msg and "'quick' is not defined" in msg


def test_literal_key_is_refused_with_hint(tmp_path):
    msg = error_of(tmp_path, VALID.replace("${OPENAI_API_KEY}", "sk-proj-abcdef0123456789abcdef"))
    assert "line 3" in msg and "providers.openai.api_key" in msg and "${" in msg
    assert "sk-proj-abcdef0123456789abcdef" not in msg


def test_missing_env_var_only_when_provider_is_used(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-present")
    cfg = load_config(write(tmp_path, VALID))  # loads fine without the key
    assert cfg.resolve_provider("anthropic").api_key == "sk-ant-present"
    with pytest.raises(ConfigError) as info:
        cfg.resolve_provider("openai")
    assert "OPENAI_API_KEY" in str(info.value) and "'openai'" in str(info.value)


def test_scripted_provider_resolves_to_fake_base_url(tmp_path):
    cfg = load_config(write(tmp_path, VALID))
    resolved = cfg.resolve_provider("demo")
    assert resolved.base_url == SCRIPTED_BASE_URL and resolved.api_key


def test_two_files_deep_merge(tmp_path):
    base = write(tmp_path, VALID)
    local = write(
        tmp_path,
        """\
        providers:
          openai: {base_url: "https://proxy.example/v1"}
        models:
          fast: {retry: {attempts: 1}}
        default_model: smart
        """,
        "local.yaml",
    )
    cfg = load_config(base, local)
    assert cfg.providers["openai"].api_key == "${OPENAI_API_KEY}"  # kept from base
    assert cfg.providers["openai"].base_url == "https://proxy.example/v1"
    assert cfg.models["fast"].retry.attempts == 1 and cfg.models["fast"].retry.max_wait == 10
    assert cfg.default_model == "smart"


def test_error_in_override_file_names_that_file(tmp_path):
    base = write(tmp_path, VALID)
    local = write(tmp_path, "models:\n  fast:\n    timeout: soon\n", "local.yaml")
    with pytest.raises(ConfigError) as info:
        load_config(base, local)
    assert "local.yaml, line 3" in str(info.value) and "models.fast.timeout" in str(info.value)


def test_config_from_dict_checks_references():
    with pytest.raises(ConfigError, match="unknown provider 'x'"):
        config_from_dict({"providers": {}, "models": {"m": {"provider": "x", "model": "y"}}})


def test_shipped_default_config_works_without_keys(monkeypatch):
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    cfg = load_config(Path(__file__).parent.parent / "configs" / "default.yaml")
    assert cfg.default_model == "demo"
    assert cfg.model_info(None).provider_type == "scripted"
    assert cfg.resolve_provider("scripted").base_url == SCRIPTED_BASE_URL
    assert {"fast", "smart"} <= set(cfg.models)


def test_a_config_with_another_problem_still_knows_the_builtin_test_alias(tmp_path):
    """`default_model: test` is valid (`test` is built in): another problem in the file must not make
    the report claim it is undefined (it did: `default_model 'test' is not defined under models`)."""
    path = write(
        tmp_path,
        """\
        providers: {openai: {}}
        models:
          fast: {provider: openai, model: gpt-4o-mini, timeout: -3}
        default_model: test
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert "(1 problem)" in text and "models.fast.timeout" in text
    assert "default_model" not in text


def test_an_unknown_model_flag_suggests_the_close_alias(tmp_path):
    config = load_config(write(tmp_path, VALID))
    with pytest.raises(ConfigError, match=r"--model fastt: not a model alias \(did you mean 'fast'\?\) \(known: "):
        config.add_offline_model("fastt")
