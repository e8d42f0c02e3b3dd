"""The LiteLLM internals the stream paths rely on, checked by name and signature.

`providers/openai_wire.py` builds requests and maps errors with LiteLLM's own functions, and
`providers/litellm_tap.py` watches the events under LiteLLM's stream wrapper. None of these is
LiteLLM's public API, so pyproject.toml pins LiteLLM to the range the tests ran on; when a
LiteLLM upgrade moves or reshapes one of them, the test below fails naming the symbol, before
any stream test fails in a confusing way.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

# (module, attribute path, parameters the runtime passes by name or position)
INTERNALS: list[tuple[str, str, tuple[str, ...]]] = [
    ("litellm.utils", "ProviderConfigManager.get_provider_chat_config", ("model", "provider")),
    ("litellm.utils", "get_optional_params", ("model", "custom_llm_provider", "messages", "drop_params")),
    ("litellm.types.utils", "LlmProviders.OPENAI", ()),
    (
        "litellm.llms.openai.chat.gpt_transformation",
        "OpenAIGPTConfig.transform_request",
        ("model", "messages", "optional_params", "litellm_params", "headers"),
    ),
    (
        "litellm.llms.openai.chat.gpt_transformation",
        "OpenAIGPTConfig.validate_environment",
        ("headers", "model", "messages", "optional_params", "litellm_params", "api_key", "api_base"),
    ),
    (
        "litellm.llms.openai.chat.gpt_transformation",
        "OpenAIGPTConfig.get_complete_url",
        ("api_base", "api_key", "model", "optional_params", "litellm_params", "stream"),
    ),
    ("litellm.llms.openai.chat.gpt_transformation", "OpenAIGPTConfig.get_api_key", ()),
    ("litellm.llms.openai.chat.gpt_transformation", "OpenAIGPTConfig.get_api_base", ()),
    ("litellm.llms.custom_httpx.http_handler", "get_async_httpx_client", ("llm_provider",)),
    (
        "litellm.litellm_core_utils.exception_mapping_utils",
        "exception_type",
        ("model", "original_exception", "custom_llm_provider"),
    ),
    ("litellm.llms.openai.common_utils", "OpenAIError", ("status_code", "message", "headers")),
    # the raw-event tap (providers/litellm_tap.py)
    ("litellm.litellm_core_utils.streaming_handler", "CustomStreamWrapper", ("completion_stream", "make_call")),
    ("litellm.llms.anthropic.chat.handler", "ModelResponseIterator.chunk_parser", ("chunk",)),
    (
        "litellm.llms.vertex_ai.gemini.vertex_and_google_ai_studio_gemini",
        "ModelResponseIterator.chunk_parser",
        ("chunk",),
    ),
    ("openai", "AsyncStream._iter_events", ()),
    ("litellm", "cost_per_token", ("model", "prompt_tokens", "completion_tokens")),
]


def _resolve(module: str, path: str) -> Any:
    target: Any = importlib.import_module(module)
    for part in path.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize(("module", "path", "params"), INTERNALS, ids=[f"{m}.{p}" for m, p, _ in INTERNALS])
def test_a_litellm_internal_the_stream_paths_use_is_where_we_expect(
    module: str, path: str, params: tuple[str, ...]
) -> None:
    symbol = f"{module}.{path}"
    try:
        target = _resolve(module, path)
    except (ImportError, AttributeError) as exc:
        pytest.fail(
            f"LiteLLM internal {symbol} is gone ({exc}): update providers/openai_wire.py or providers/litellm_tap.py"
        )
    if not params:
        return
    try:
        accepted = inspect.signature(target).parameters
    except (TypeError, ValueError):
        pytest.fail(f"LiteLLM internal {symbol} has no inspectable signature any more")
    missing = [p for p in params if p not in accepted]
    assert not missing, (
        f"LiteLLM internal {symbol} no longer takes {missing}: its signature is now {inspect.signature(target)}"
    )


def test_the_gemini_thought_signature_separator_is_the_one_we_split_on() -> None:
    from litellm.litellm_core_utils.prompt_templates.factory import THOUGHT_SIGNATURE_SEPARATOR

    from providers.call_ids import split_signature

    packed = f"96c1su3s{THOUGHT_SIGNATURE_SEPARATOR}EpID"
    assert split_signature(packed) == ("96c1su3s", "EpID"), (
        "litellm...factory.THOUGHT_SIGNATURE_SEPARATOR changed: update providers/call_ids.py"
    )


def test_the_openai_config_is_the_class_we_check() -> None:
    from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig
    from litellm.types.utils import LlmProviders
    from litellm.utils import ProviderConfigManager

    config = ProviderConfigManager.get_provider_chat_config(model="gpt-4o-mini", provider=LlmProviders.OPENAI)
    assert isinstance(config, OpenAIGPTConfig), f"LiteLLM's openai chat config is now {type(config).__qualname__}"
