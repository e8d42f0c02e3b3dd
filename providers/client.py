"""Model alias -> LiteLLM streaming call, with retries, fallbacks, usage and cost.

The executor sees only the small values of `providers.stream`. Retries are
tenacity's (LiteLLM's own are switched off) so the policy lives in the config
and tests can drive the clock. LiteLLM is imported on the first call: it takes
seconds to import and must not slow `import orchestrator`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import aclosing, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tenacity import AsyncRetrying, AttemptManager, RetryCallState, retry_if_exception, stop_after_attempt

from providers import request_memo
from providers.answer_size import AnswerSize
from providers.config import ConfigError, ModelConfig, ProvidersConfig, ResolvedProvider, RetryPolicy
from providers.deadline import IdleDeadline
from providers.failures import Failure, classify_error, retry_after, scrub
from providers.in_flight import InFlight
from providers.request import JSON, ChatMessage, ModelEvents, RequestExtras
from providers.stream import ModelInfo, ProviderError, StreamEnd, StreamItem, StreamRestart, StreamUsage
from providers.streams import ReadEnd, StreamReader, anthropic_wire, gemini_wire, openai_wire
from providers.streams.sse_json import json_events
from providers.text import clean_item

__all__ = ["ModelClient", "UsageMeter", "accepts_seed", "classify_error", "seeded", "warm_up"]

_SEED: ContextVar[int | None] = ContextVar("providers_request_seed", default=None)


@contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Within this block (and the tasks started in it), every model request carries `seed` where the
    provider accepts one (`accepts_seed`): an eval run's conversation asks for the same sampling each
    time it is run. Where the provider has none the request goes without (never an unsupported-parameter
    error); None: no seed is sent."""
    token = _SEED.set(seed)
    try:
        yield
    finally:
        _SEED.reset(token)


@functools.cache
def accepts_seed(provider_type: str | None, model: str) -> bool:
    """Whether requests to `model` ("family/name") take a `seed`: LiteLLM's table of each provider's
    parameters (OpenAI's `seed`, Gemini's `generationConfig.seed`...; not Anthropic's). The offline
    types take it (the `test` model draws its arguments from it)."""
    if provider_type in ("scripted", "offline"):
        return True
    family, _, name = model.partition("/")
    try:
        supported = _litellm().get_supported_openai_params(model=name or family, custom_llm_provider=family)
    except Exception:  # a family LiteLLM does not know: send nothing it might refuse
        return False
    return "seed" in (supported or ())


_LITELLM: Any = None


def _litellm() -> Any:
    """Import and quiet LiteLLM once: offline, httpx transport, no debug banner.

    Offline (`LITELLM_OFFLINE_MODE`, unless the host set it): LiteLLM otherwise fetches what it
    needs on its own, synchronously: its cost map, its Anthropic beta-header table and, to price a
    streamed answer as it opens (on the event loop, inside the request), a HuggingFace tokenizer
    for Llama and Cohere models: 23 s of retries on a machine without network, every conversation
    of the process waiting, longer where connections time out. Offline it uses its bundled copies
    and counts with tiktoken.

    The host application's own LiteLLM callbacks (Langfuse, OpenTelemetry, cost logging) are
    left as they are: LiteLLM is a shared library here, and what the runtime needs
    (`drop_params`, no retries) is passed per call."""
    global _LITELLM
    if _LITELLM is None:
        os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.disable_aiohttp_transport = True
        litellm.suppress_debug_info = True
        litellm.telemetry = False
        warnings.filterwarnings("ignore", message=r".*ReadOnly. qualifier", category=UserWarning)
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx", "openai"):
            logging.getLogger(name).setLevel(logging.WARNING)
        _LITELLM = litellm
    return _LITELLM


def warm_up() -> None:
    """Everything a first model call would import, done now (see `Runtime.open`)."""
    _litellm()
    import providers.streams.litellm_stream  # noqa: F401  (LiteLLM's own path: imported on its first use)

    openai_wire.warm_up()
    anthropic_wire.warm_up()
    gemini_wire.warm_up()


# -- usage -------------------------------------------------------------------


@dataclass
class UsageMeter:
    """Sums `StreamEnd.usage` over several requests (per thread or run)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    requests: int = 0
    by_model: dict[str, StreamUsage] = field(default_factory=dict)

    def add(self, end: StreamEnd) -> None:
        self.requests += 1
        self.input_tokens += end.usage.input_tokens
        self.output_tokens += end.usage.output_tokens
        self.cost += end.usage.cost
        row = self.by_model.setdefault(end.model, StreamUsage())
        row.input_tokens += end.usage.input_tokens
        row.output_tokens += end.usage.output_tokens
        row.cost += end.usage.cost


def _cost(
    model: ModelConfig, litellm_model: str, input_tokens: int, output_tokens: int, reported: float | None
) -> float:
    if model.price is not None:
        return (input_tokens * model.price.input + output_tokens * model.price.output) / 1_000_000
    if litellm_model in _UNPRICED:
        return float(reported or 0.0)
    if not _litellm_ready():  # LiteLLM still importing: its price from an earlier process, if remembered
        remembered = request_memo.cost_from_memo(litellm_model, input_tokens, output_tokens)
        if remembered is not None:
            return remembered or float(reported or 0.0)
    try:
        cost = _price(litellm_model)
        total = cost(input_tokens, output_tokens)
        request_memo.remember_rates(litellm_model, cost)
        return total
    except Exception:  # model missing from the local cost map: unknown price, not an error
        _UNPRICED.add(litellm_model)  # the lookup's exception path is slow; ask once per model
        request_memo.remember_unpriced(litellm_model)
        return float(reported or 0.0)


_UNPRICED: set[str] = set()


def _price(litellm_model: str) -> Callable[[int, int], float]:
    """LiteLLM's price of a request to `litellm_model`, as a function of its token counts."""
    cost_per_token = _litellm().cost_per_token

    def cost(prompt_tokens: int, completion_tokens: int) -> float:
        prompt, completion = cost_per_token(
            model=litellm_model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
        return float(prompt + completion)

    return cost


def _litellm_ready() -> bool:
    """LiteLLM is imported (by us or the host), not still importing in `orchestrator run`'s background thread."""
    if _LITELLM is not None:
        return True
    module = sys.modules.get("litellm")
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


# -- the client --------------------------------------------------------------


@dataclass
class _Attempt:
    """Mutable bookkeeping shared by the attempts of one `stream()` call."""

    number: int = 0
    dirty: bool = False  # items were yielded since the last restart


class ModelClient:
    def __init__(self, config: ProvidersConfig, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.config = config
        self._sleep = sleep
        self._retry_rules: dict[str, _RetryRules] = {}  # per alias: not rebuilt (and held) per request in flight
        self._in_flight = InFlight()  # requests past a provider's `max_in_flight` wait here, not in the HTTP pool

    def model_info(self, alias: str | None) -> ModelInfo:
        return self.config.model_info(alias)

    async def stream(
        self,
        alias: str | None,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Mapping[str, JSON]] | None = None,
        extra: RequestExtras | None = None,
        on_event: ModelEvents | None = None,
    ) -> AsyncIterator[StreamItem]:
        """Stream one model answer; on failure retry, then fall back along the chain. One generator over
        the requests, not one per layer: each item passes one fewer, and a waiting request holds less."""
        chain = tuple(self.config.fallback_chain(alias))  # of strings: the collector stops tracking it
        state = _Attempt()
        request = _Request(messages, tools, extra)
        failures: list[ProviderError] = []
        for position in range(len(chain)):
            current = chain[position]
            if failures and on_event is not None:
                on_event("model_fallback", {"from": chain[position - 1], "to": current, "error": str(failures[-1])})
            model = self.config.models[current]
            info = self.config.model_info(current)
            retries: _Retries | None = None  # built at the first failure: most requests never need it
            while True:
                state.number += 1
                if state.dirty:
                    reason = "retry" if retries is not None else "fallback"
                    yield StreamRestart(attempt=state.number, reason=reason, model=info.model)
                    state.dirty = False
                try:
                    async with aclosing(self._one_request(model, info, request, state)) as items:
                        async for item in items:
                            state.dirty = True
                            yield item
                    return
                except Exception as exc:
                    failure = exc
                retries = retries or _Retries(self._rules(current, model), self._sleep)
                try:
                    await retries.after(failure)  # waits for the next attempt, or raises the failure
                except Exception as exc:
                    failures.append(self._error(exc, current, classify_error(exc)))
                    break
        raise _final(failures) from None

    def _rules(self, alias: str, model: ModelConfig) -> _RetryRules:
        rules = self._retry_rules.get(alias)
        if rules is None or rules.policy is not model.retry:  # built once per policy, shared by its requests
            rules = self._retry_rules[alias] = _RetryRules(
                model.retry, stop_after_attempt(model.retry.attempts), _wait_for(model)
            )
        return rules

    async def _one_request(
        self, model: ModelConfig, info: ModelInfo, request: _Request, state: _Attempt
    ) -> AsyncGenerator[StreamItem, None]:
        places = self._in_flight.places(model.provider, self.config.providers[model.provider].max_in_flight)
        await places.acquire()  # before the request is built: a conversation waiting here holds little
        try:
            provider = self.config.resolve_provider(model.provider)
            kwargs = _request_kwargs(provider, model, info, request)
            size = AnswerSize(model.max_answer_bytes)
            # One deadline for the gaps and the whole answer, moved per chunk (a wait_for per chunk costs
            # a task each); the gap's is lifted while the consumer holds an item.
            async with IdleDeadline(model.timeout, total=model.total_timeout) as deadline:
                deadline.waiting()  # from the request on: the first byte counts too
                chunks, reader = await _open_stream(provider, model, info, kwargs)
                try:
                    source = chunks.__aiter__()
                    while True:
                        deadline.waiting()
                        try:
                            chunk = await source.__anext__()
                        except StopAsyncIteration:
                            break
                        deadline.holding()
                        for item in reader.feed(chunk):
                            clean_item(item)  # a lone surrogate would make the step unstorable
                            size.add(item)  # a flood stops here, on every path
                            yield item
                finally:
                    deadline.holding()
                    await _close(chunks)
        finally:
            places.release()
        end = reader.end()
        for item in end.tail:
            clean_item(item)
            size.add(item)
            yield item
        yield _stream_end(end, model, info, state.number)

    def _error(self, exc: BaseException, alias: str, failure: Failure) -> ProviderError:
        model = self.config.models[alias]
        secrets: list[str] = []
        provider: ResolvedProvider | None = None
        try:
            provider = self.config.resolve_provider(model.provider)
            secrets = provider.secrets()
        except ConfigError:
            pass
        if failure.kind == "auth":
            source = (
                f"the environment variable {provider.key_env}"
                if provider and provider.key_env
                else "its api_key setting"
            )
            message = (
                f"authentication failed for provider '{model.provider}' (HTTP {failure.status}) on model alias "
                f"'{alias}': check the API key from {source}"
            )
        elif failure.kind == "config":
            message = f"model alias '{alias}': {exc}"
        else:
            message = f"model alias '{alias}' (provider '{model.provider}') failed: {type(exc).__name__}: {exc}"
        return ProviderError(
            scrub(message, secrets),
            provider=model.provider,
            status=failure.status,
            retryable=failure.retryable,
            kind=failure.kind,
        )


# -- which reader reads a response ---------------------------------------------

_Opened = tuple[AsyncIterator[Any], StreamReader[Any]]
"""A response's raw events and their reader (the events are the reader's: JSON dicts, or LiteLLM's chunks)."""


async def _open_stream(
    provider: ResolvedProvider, model: ModelConfig, info: ModelInfo, kwargs: dict[str, Any]
) -> _Opened:
    """The response stream and its reader: the runtime's own where the provider has one (unless it says
    `stream: litellm`, or the request needs what only LiteLLM's stream does: each module's `supports`),
    else LiteLLM's stream."""
    cap = model.max_answer_bytes  # the runtime's readers also refuse one event larger than it could need
    own = provider.stream == "auto"
    if own and provider.type in openai_wire.WIRE_TYPES:
        # LiteLLM still importing: the request it built last time (providers/request_memo.py)
        request = None if _litellm_ready() else openai_wire.recall_request(kwargs)
        if request is None:
            _litellm()  # configured before any part of it is imported
            request = openai_wire.build_request(kwargs, secrets=provider.secrets)
        return json_events(request, max_answer_bytes=cap), openai_wire.OpenAIReader()
    _litellm()
    if own and provider.type == "anthropic" and anthropic_wire.supports(kwargs):
        request = anthropic_wire.build_request(kwargs)
        return json_events(request, max_answer_bytes=cap), anthropic_wire.AnthropicReader(request.tool_names)
    if own and provider.type == "gemini" and gemini_wire.supports(kwargs):
        request = await gemini_wire.build_request(kwargs)
        return json_events(request, max_answer_bytes=cap), gemini_wire.GeminiReader()
    from providers.streams import litellm_stream

    # LiteLLM's timeout covers the HTTP layer; the caller's deadline also bounds the first byte, every gap
    # between chunks and the whole answer, whatever transport (or mock).
    return litellm_stream.reading(info, await _litellm().acompletion(**kwargs))


def _stream_end(end: ReadEnd, model: ModelConfig, info: ModelInfo, attempts: int) -> StreamEnd:
    """The answer's end as the executor sees it: the reader's, priced, naming the model that answered."""
    cost = _cost(model, info.model, end.input_tokens, end.output_tokens, end.reported_cost)
    return StreamEnd(
        finish_reason=end.finish_reason,
        model=_qualify(info, end.model) if end.model else info.model,
        provider=model.provider,
        usage=StreamUsage(end.input_tokens, end.output_tokens, cost),
        attempts=attempts,
        finish=end.finish,
    )


@dataclass(frozen=True, slots=True)
class _Request:
    """What the caller asked, the same for every attempt and fallback."""

    messages: Sequence[ChatMessage]
    tools: Sequence[Mapping[str, JSON]] | None
    extra: RequestExtras | None


def _final(failures: list[ProviderError]) -> ProviderError:
    """The last failure decides kind and status; the message tells the whole chain."""
    last = failures[-1]
    if len(failures) == 1:
        return last
    chain = "; ".join(f"[{i + 1}] {f}" for i, f in enumerate(failures))
    return ProviderError(
        f"all {len(failures)} models failed: {chain}",
        provider=last.provider,
        status=last.status,
        retryable=last.retryable,
        kind=last.kind,
    )


@dataclass(frozen=True, slots=True)
class _RetryRules:
    policy: RetryPolicy  # the config they were built from
    stop: stop_after_attempt
    wait: Callable[[RetryCallState], float]


class _Retries:
    """Tenacity's retry loop for one model in the chain, driven one failure at a time. Built at the first
    failure: a retrying loop leaves some 30 objects in a reference cycle, garbage for the collector."""

    def __init__(self, rules: _RetryRules, sleep: Callable[[float], Awaitable[None]]) -> None:
        self._attempts = AsyncRetrying(stop=rules.stop, wait=rules.wait, retry=_RETRYABLE, sleep=sleep, reraise=True)
        self._manager: AttemptManager | None = None

    async def after(self, failure: Exception) -> None:
        """Record `failure` as the current attempt's outcome; return once the next attempt may start,
        or raise `failure` when the policy gives up (not retryable, or out of attempts)."""
        if self._manager is None:
            self._attempts = self._attempts.__aiter__()
            self._manager = await self._attempts.__anext__()  # attempt 1: the one that just failed
        with self._manager:
            raise failure  # recorded as this attempt's outcome, and swallowed by the manager
        self._manager = await self._attempts.__anext__()  # type: ignore[unreachable]


def _retryable(exc: BaseException) -> bool:
    return classify_error(exc).retryable


_RETRYABLE = retry_if_exception(_retryable)


def _wait_for(model: ModelConfig) -> Callable[[RetryCallState], float]:
    policy = model.retry

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hinted = retry_after(exc) if exc is not None else None
        if hinted is not None:
            return min(hinted, policy.max_wait)
        return min(policy.backoff * 2.0 ** (state.attempt_number - 1), policy.max_wait)

    return wait


def _request_kwargs(
    provider: ResolvedProvider, model: ModelConfig, info: ModelInfo, request: _Request
) -> dict[str, Any]:
    """`litellm.acompletion`'s arguments: every stream path starts from these."""
    kwargs: dict[str, Any] = {
        **provider.params,
        **model.params,
        **(request.extra or {}),
        "model": info.model,
        "messages": request.messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "timeout": model.timeout,
        "max_retries": 0,
        "num_retries": 0,
        "drop_params": False,
    }
    if request.tools:
        kwargs["tools"] = request.tools
    seed = _SEED.get()
    if seed is not None and "seed" not in kwargs and accepts_seed(provider.type, info.model):
        kwargs["seed"] = seed
    if provider.api_key:
        kwargs["api_key"] = provider.api_key
    if provider.base_url:
        kwargs["api_base"] = provider.base_url
    if provider.api_version:
        kwargs["api_version"] = provider.api_version
    if provider.headers:
        kwargs["extra_headers"] = dict(provider.headers)
    return kwargs


def _qualify(info: ModelInfo, served: str) -> str:
    family = info.model.split("/", 1)[0]
    return served if served.startswith(f"{family}/") else f"{family}/{served}"


async def _close(response: Any) -> None:
    """Close the HTTP stream even when the consumer stopped early or was cancelled."""
    closer = getattr(response, "aclose", None)
    if closer is None:
        return
    try:
        await asyncio.shield(closer())
    except Exception:
        pass
