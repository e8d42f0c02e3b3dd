"""Every LiteLLM internal the stream paths use, in one place.

The runtime's readers let LiteLLM build each request (parameter mapping, the provider's
transforms, headers, URL), send it on LiteLLM's HTTP client and map its failures; on
LiteLLM's own stream path the tap watches the events under its stream wrapper. None of
that is LiteLLM's public API, and each minor release may move or reshape some of it.
So nothing else in `providers` imports a LiteLLM module below `litellm` itself: it
imports from here, and the instance patches the tap makes (`observe_*`) are written
here too. pyproject.toml pins LiteLLM to the range the tests ran on, the lock files pin
the one release that was reviewed, and tests/test_litellm_internals.py checks every
name in `__all__` on its own (module, name, the parameters passed), so a LiteLLM upgrade
fails naming each break before any stream test fails in a confusing way.

Importing this module imports LiteLLM (seconds): import it inside the functions that
need it, after `providers.client` configured LiteLLM, never at the top of a module that
`import orchestrator` loads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from litellm.anthropic_beta_gated_fields import strip_beta_gated_request_body
from litellm.anthropic_beta_headers_manager import update_request_with_filtered_beta
from litellm.litellm_core_utils.exception_mapping_utils import exception_type
from litellm.litellm_core_utils.get_litellm_params import get_litellm_params
from litellm.litellm_core_utils.prompt_templates.factory import THOUGHT_SIGNATURE_SEPARATOR
from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
from litellm.litellm_core_utils.url_utils import ensure_api_route
from litellm.llms.anthropic.chat.handler import ModelResponseIterator as AnthropicChunkParser
from litellm.llms.anthropic.chat.transformation import ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY, AnthropicConfig
from litellm.llms.anthropic.common_utils import (
    ANTHROPIC_ERROR_STATUS_CODE_MAP,
    AnthropicError,
    anthropic_error_frame_exception,
)
from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler, get_async_httpx_client
from litellm.llms.gemini.common_utils import get_api_key_from_env
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig
from litellm.llms.openai.common_utils import OpenAIError
from litellm.llms.vertex_ai.common_utils import VertexAIError
from litellm.llms.vertex_ai.gemini.transformation import async_transform_request_body
from litellm.llms.vertex_ai.gemini.vertex_and_google_ai_studio_gemini import (
    ModelResponseIterator as GeminiChunkParser,
)
from litellm.llms.vertex_ai.gemini.vertex_and_google_ai_studio_gemini import VertexGeminiConfig, VertexLLM
from litellm.secret_managers.main import get_secret, get_secret_bool
from litellm.types.utils import LlmProviders, ModelResponseStream
from litellm.utils import ProviderConfigManager, get_optional_params
from openai import AsyncStream as OpenAIStream

__all__ = [
    # building requests (providers/streams/*_wire.py, litellm_params.py)
    "ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY",
    "AnthropicConfig",
    "LlmProviders",
    "OpenAIGPTConfig",
    "ProviderConfigManager",
    "VertexGeminiConfig",
    "VertexLLM",
    "async_transform_request_body",
    "ensure_api_route",
    "get_api_key_from_env",
    "get_litellm_params",
    "get_optional_params",
    "get_secret",
    "get_secret_bool",
    "strip_beta_gated_request_body",
    "update_request_with_filtered_beta",
    # sending them, and mapping what fails (providers/streams/sse_json.py, providers/offline.py)
    "ANTHROPIC_ERROR_STATUS_CODE_MAP",
    "AnthropicError",
    "AsyncHTTPHandler",
    "OpenAIError",
    "VertexAIError",
    "anthropic_error_frame_exception",
    "exception_type",
    "get_async_httpx_client",
    # LiteLLM's own stream path (providers/streams/litellm_stream.py, litellm_tap.py): what the tap patches
    "AnthropicChunkParser",
    "CustomStreamWrapper",
    "GeminiChunkParser",
    "ModelResponseStream",
    "OpenAIStream",
    "THOUGHT_SIGNATURE_SEPARATOR",
    "inner_stream",
    "observe_chunks",
    "observe_opening",
    "observe_sse",
    "opens_lazily",
    "parses_chunks",
    "reads_sse",
]

Chunk = dict[str, Any]  # one decoded provider event, as LiteLLM's iterators hand it on


def inner_stream(wrapper: object) -> object | None:
    """The provider stream under a `CustomStreamWrapper` (its `completion_stream`; None while `make_call` has
    not opened it yet, as for Gemini)."""
    return getattr(wrapper, "completion_stream", None)


def opens_lazily(wrapper: object) -> bool:
    """Whether the wrapper opens its provider stream on the first read (`make_call`), as for Gemini."""
    return inner_stream(wrapper) is None and callable(getattr(wrapper, "make_call", None))


def parses_chunks(stream: object) -> bool:
    """Whether `stream` is one of LiteLLM's iterators, which call `self.chunk_parser(chunk=...)` per event
    (`AnthropicChunkParser`, `GeminiChunkParser`, the OpenAI-compatible ones)."""
    return callable(getattr(stream, "chunk_parser", None))


def reads_sse(stream: object) -> bool:
    """Whether `stream` is the openai SDK's `OpenAIStream`, which reads its events through `self._iter_events()`."""
    return callable(getattr(stream, "_iter_events", None))


def observe_opening(wrapper: object, opened: Callable[[object], None]) -> None:
    """Call `opened(stream)` when the wrapper's `make_call` opens the provider stream on the first read."""
    make_call: Callable[..., Any] = getattr(wrapper, "make_call")  # noqa: B009 (an instance attribute, replaced)

    async def opening(*args: Any, **kwargs: Any) -> Any:
        stream = await make_call(*args, **kwargs)
        opened(stream)
        return stream

    setattr(wrapper, "make_call", opening)  # noqa: B010 (this response's instance only, never the class)


def observe_chunks(stream: object, see: Callable[[Chunk], None]) -> None:
    """`see(chunk)` on each decoded event before LiteLLM's iterator parses it; the events pass on unchanged."""
    parse: Callable[..., Any] = getattr(stream, "chunk_parser")  # noqa: B009

    def parsed(chunk: Any) -> Any:
        if isinstance(chunk, dict):
            see(chunk)
        return parse(chunk=chunk)

    setattr(stream, "chunk_parser", parsed)  # noqa: B010


def observe_sse(stream: object, see: Callable[[str], None]) -> None:
    """`see(data)` on each SSE event's data the openai SDK's stream reads; the events pass on unchanged."""
    events: Callable[[], AsyncIterator[Any]] = getattr(stream, "_iter_events")  # noqa: B009

    async def read() -> AsyncIterator[Any]:
        async for sse in events():
            see(sse.data)
            yield sse

    setattr(stream, "_iter_events", read)  # noqa: B010
