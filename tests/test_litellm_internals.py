"""The LiteLLM internals the stream paths rely on, each checked on its own by name and signature.

Every non-public LiteLLM name `providers` uses is imported in one module,
`providers/_litellm_internal.py`, and nowhere else (the last test here holds that). The
tests below read that module's `__all__` and its imports without importing it, then resolve
each name on its own: when a LiteLLM upgrade moves or reshapes several of them, each one
fails here by name (the module itself would stop at the first), before any stream test
fails in a confusing way. pyproject.toml pins LiteLLM to the range the tests ran on and the
lock files (requirements/) to the release that was reviewed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
INTERNAL = ROOT / "providers" / "_litellm_internal.py"

# What the runtime relies on, per name in `__all__`: "Name" or "Name.attribute" -> the parameters passed by
# name or position (empty: only that it exists). A name added to `__all__` must say here what it relies on.
RELIED_ON: dict[str, tuple[str, ...]] = {
    # building requests
    "ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY": (),
    "AnthropicConfig.validate_environment": (
        "api_key",
        "headers",
        "model",
        "messages",
        "optional_params",
        "litellm_params",
        "api_base",
    ),
    "AnthropicConfig.transform_request": ("model", "messages", "optional_params", "litellm_params", "headers"),
    "LlmProviders.OPENAI": (),
    "OpenAIGPTConfig.transform_request": ("model", "messages", "optional_params", "litellm_params", "headers"),
    "OpenAIGPTConfig.validate_environment": (
        "headers",
        "model",
        "messages",
        "optional_params",
        "litellm_params",
        "api_key",
        "api_base",
    ),
    "OpenAIGPTConfig.get_complete_url": ("api_base", "api_key", "model", "optional_params", "litellm_params", "stream"),
    "OpenAIGPTConfig.get_api_key": (),
    "OpenAIGPTConfig.get_api_base": (),
    "ProviderConfigManager.get_provider_chat_config": ("model", "provider"),
    "VertexGeminiConfig.validate_environment": (
        "api_key",
        "headers",
        "model",
        "messages",
        "optional_params",
        "litellm_params",
    ),
    "VertexLLM.get_token_and_url": (
        "model",
        "auth_header",
        "gemini_api_key",
        "vertex_project",
        "vertex_location",
        "vertex_credentials",
        "stream",
        "custom_llm_provider",
        "api_base",
    ),
    "async_transform_request_body": (
        "gemini_api_key",
        "messages",
        "api_base",
        "model",
        "client",
        "timeout",
        "extra_headers",
        "optional_params",
        "logging_obj",
        "custom_llm_provider",
        "litellm_params",
        "vertex_project",
        "vertex_location",
        "vertex_auth_header",
    ),
    "ensure_api_route": (),
    "get_api_key_from_env": (),
    "get_litellm_params": ("api_key", "api_base", "custom_llm_provider"),
    "get_optional_params": ("model", "custom_llm_provider", "messages", "drop_params"),
    "get_secret": (),
    "get_secret_bool": (),
    "strip_beta_gated_request_body": ("drop_params", "model", "provider"),
    "update_request_with_filtered_beta": ("headers", "request_data", "provider", "api_base"),
    # sending them, and mapping what fails
    "ANTHROPIC_ERROR_STATUS_CODE_MAP": (),
    "AnthropicError": ("status_code", "message", "headers"),
    "AsyncHTTPHandler": ("transport",),
    "AsyncHTTPHandler.post": ("url", "content", "headers", "timeout", "stream"),
    "OpenAIError": ("status_code", "message", "headers"),
    "VertexAIError": ("status_code", "message", "headers"),
    "anthropic_error_frame_exception": (),
    "exception_type": ("model", "original_exception", "custom_llm_provider"),
    "get_async_httpx_client": ("llm_provider",),
    # LiteLLM's own stream path: what the tap patches on one response's instances
    "AnthropicChunkParser.chunk_parser": ("chunk",),
    "CustomStreamWrapper": ("completion_stream", "make_call"),
    "CustomStreamWrapper.aclose": (),
    "GeminiChunkParser.chunk_parser": ("chunk",),
    "ModelResponseStream": (),
    "OpenAIStream._iter_events": (),
    "THOUGHT_SIGNATURE_SEPARATOR": (),
    # written in the module itself, over the names above
    "inner_stream": (),
    "observe_chunks": (),
    "observe_opening": (),
    "observe_sse": (),
    "opens_lazily": (),
    "parses_chunks": (),
    "reads_sse": (),
}


def _read_module() -> tuple[list[str], dict[str, tuple[str, str]], set[str]]:
    """`__all__`, name -> (module, attribute) for each `from X import Y [as Z]`, and the functions defined."""
    tree = ast.parse(INTERNAL.read_text(encoding="utf-8"))
    exported: list[str] = []
    imported: dict[str, tuple[str, str]] = {}
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.FunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            exported = list(ast.literal_eval(node.value))
    return exported, imported, defined


EXPORTED, IMPORTED, DEFINED = _read_module()


def _resolved(name: str) -> Any:
    """The object `name` in `__all__` stands for, found on its own (not through the internal module)."""
    if name in DEFINED:
        return getattr(importlib.import_module("providers._litellm_internal"), name)
    module, attribute = IMPORTED[name]
    return getattr(importlib.import_module(module), attribute)


@pytest.mark.parametrize("name", EXPORTED)
def test_each_internal_is_where_we_expect_and_takes_what_we_pass(name: str) -> None:
    assert name in IMPORTED or name in DEFINED, f"{name} is in __all__ but neither imported nor defined"
    where = ".".join(IMPORTED.get(name, ("providers._litellm_internal", name)))
    try:
        target = _resolved(name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"LiteLLM internal {where} is gone ({exc}): update providers/_litellm_internal.py")
    checks = {key: params for key, params in RELIED_ON.items() if key.split(".")[0] == name}
    assert checks, f"{name}: say in RELIED_ON what the runtime relies on"
    for key, params in checks.items():
        symbol = target
        for part in key.split(".")[1:]:
            symbol = getattr(symbol, part, None)
            assert symbol is not None, f"LiteLLM internal {where} has no {part!r} any more ({key})"
        if not params:
            continue
        try:
            accepted = inspect.signature(symbol).parameters
        except (TypeError, ValueError):
            pytest.fail(f"LiteLLM internal {key} has no inspectable signature any more")
        missing = [p for p in params if p not in accepted]
        assert not missing, (
            f"LiteLLM internal {key} no longer takes {missing}: its signature is {inspect.signature(symbol)}"
        )


def test_every_name_relied_on_is_exported_and_every_import_too() -> None:
    assert {key.split(".")[0] for key in RELIED_ON} == set(EXPORTED)
    assert set(IMPORTED) - {"AsyncIterator", "Callable", "Any"} <= set(EXPORTED)


def test_no_other_module_of_providers_imports_below_litellm() -> None:
    """`import litellm` (its public API: acompletion, cost_per_token, settings) is fine anywhere; its
    submodules are internals and come through providers/_litellm_internal.py only."""
    found = []
    for path in sorted((ROOT / "providers").rglob("*.py")):
        if path == INTERNAL:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith("litellm.")]
    assert not found, "LiteLLM internals imported outside providers/_litellm_internal.py:\n" + "\n".join(found)


def test_the_gemini_thought_signature_separator_is_the_one_we_split_on() -> None:
    from providers.streams.litellm_stream import split_signature

    assert split_signature("96c1su3s__thought__EpID") == ("96c1su3s", "EpID"), (
        "LiteLLM's THOUGHT_SIGNATURE_SEPARATOR is no longer `__thought__`: packed ids in stored histories differ"
    )


def test_the_openai_config_is_the_class_we_check() -> None:
    from providers._litellm_internal import LlmProviders, OpenAIGPTConfig, ProviderConfigManager

    config = ProviderConfigManager.get_provider_chat_config(model="gpt-4o-mini", provider=LlmProviders.OPENAI)
    assert isinstance(config, OpenAIGPTConfig), f"LiteLLM's openai chat config is now {type(config).__qualname__}"


def test_the_public_calls_take_what_we_pass() -> None:
    import litellm

    for function, params in (
        (litellm.acompletion, ("model", "messages", "stream")),
        (litellm.cost_per_token, ("model", "prompt_tokens", "completion_tokens")),
    ):
        accepted = inspect.signature(function).parameters
        assert all(p in accepted for p in params), f"litellm.{function.__name__} is now {inspect.signature(function)}"


def test_each_wire_maps_its_http_failures_to_an_exported_error_class() -> None:
    from providers.streams.anthropic_wire import ANTHROPIC
    from providers.streams.gemini_wire import GEMINI
    from providers.streams.openai_wire import OPENAI

    assert {wire.http_error for wire in (OPENAI, ANTHROPIC, GEMINI)} <= set(EXPORTED)
