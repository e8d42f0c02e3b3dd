"""LiteLLM's parameter mapping, remembered per model and parameters.

`litellm.utils.get_optional_params` maps OpenAI-style parameters to a
provider's (`max_tokens` -> `max_output_tokens`, `tool_choice` shapes, thinking
budgets, unsupported ones -> `UnsupportedParamsError`). For Anthropic and
Gemini it costs 0.4-0.6 ms per request, mostly model-capability lookups, and
its answer depends only on the model and the parameters (never the messages),
which stay the same for every step of a conversation. So the readers ask
LiteLLM once per distinct (model, parameters) and hand each request its own
copy (LiteLLM's transforms edit what they are given). A failure is never
remembered: an unsupported parameter raises on every request, as on LiteLLM's
own path.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from providers.streams.sse_json import Transport, split_transport

__all__ = ["MappedCall", "editable_copy", "mapped_call", "optional_params"]

_SHARED = (str, int, float, bool, type(None))
_T = TypeVar("_T")

_SIZE = 512
_MAPPED: OrderedDict[str, dict[str, Any]] = OrderedDict()


@dataclass(frozen=True, slots=True)
class MappedCall:
    """`litellm.acompletion`'s arguments as the Anthropic and Gemini request builders take them."""

    model: str  # the provider's model name, without LiteLLM's `family/` prefix
    messages: list[Any]  # a copy LiteLLM's transforms may edit in place (they do: the system message)
    transport: Transport
    optional: dict[str, Any]  # the parameters as LiteLLM maps them for the family, `stream` left out


def mapped_call(kwargs: dict[str, Any], family: str) -> MappedCall:
    """Split and map the arguments as `litellm.acompletion` does before it builds a `family` request."""
    params = dict(kwargs)
    model = params.pop("model").removeprefix(f"{family}/")
    messages = editable_copy(params.pop("messages"))
    transport = split_transport(params)
    optional = optional_params(model, family, messages, params)
    optional.pop("stream", None)
    return MappedCall(model, messages, transport, optional)


def optional_params(model: str, provider: str, messages: list[Any], params: dict[str, Any]) -> dict[str, Any]:
    """`get_optional_params(model=..., custom_llm_provider=..., messages=..., **params)`, memoized."""
    import litellm

    from providers._litellm_internal import get_optional_params

    # LiteLLM's global switches change the answer, so they are part of the key.
    key = json.dumps([model, provider, litellm.drop_params, params], sort_keys=True, default=repr)
    mapped = _MAPPED.get(key)
    if mapped is None:
        mapped = get_optional_params(model=model, custom_llm_provider=provider, messages=messages, **params)
        _MAPPED[key] = mapped
        if len(_MAPPED) > _SIZE:
            _MAPPED.popitem(last=False)
    else:
        _MAPPED.move_to_end(key)
    return editable_copy(mapped)


def editable_copy(value: _T) -> _T:
    """A copy LiteLLM's transforms may edit (they change messages and parameters in place): dicts and
    lists copied all the way down, strings and numbers shared, anything else through `copy.deepcopy`.
    Messages and parameters are JSON-shaped, and for them this is a quarter of `deepcopy`'s cost
    (15 against 56 us for a 31-message history), paid on every request."""
    return cast(_T, _copied(value))


def _copied(value: Any) -> Any:
    if type(value) is dict:
        return {key: _copied(item) for key, item in value.items()}
    if type(value) is list:
        return [_copied(item) for item in value]
    if isinstance(value, _SHARED):
        return value
    return copy.deepcopy(value)
