"""Model alias -> LiteLLM streaming call, with retries, fallbacks, usage and cost.

The executor sees only the small values of `providers.stream`. Retries are
tenacity's (LiteLLM's own are switched off) so the policy lives in the config
and tests can drive the clock. LiteLLM is imported on the first call: it takes
seconds to import and must not slow `import orchestrator`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from tenacity import AsyncRetrying, AttemptManager, RetryCallState, retry_if_exception, stop_after_attempt

from providers import anthropic_wire, gemini_wire, openai_wire, request_memo
from providers.answer_size import AnswerSize
from providers.call_ids import CallIndex
from providers.config import ConfigError, ModelConfig, ProvidersConfig, ResolvedProvider, RetryPolicy
from providers.deadline import IdleDeadline
from providers.failures import Failure, StreamCut, classify_error, retry_after, scrub
from providers.finish import normalize_finish
from providers.in_flight import InFlight
from providers.litellm_items import delta_items, ended_despite, tap_for
from providers.litellm_tap import MARKED, RawTap
from providers.openai_wire import WIRE_TYPES, build_request, inband_error, recall_request, stream_chunks
from providers.stream import (
    FinishReason,
    ModelInfo,
    ProviderError,
    ReasoningDelta,
    RefusalDelta,
    StreamEnd,
    StreamItem,
    StreamRestart,
    StreamUsage,
    TextDelta,
    ToolCallDelta,
)
from providers.text import clean_item

__all__ = ["ModelClient", "UsageMeter", "classify_error", "warm_up"]

EventSink = Callable[[str, dict[str, Any]], None]
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


@dataclass
class _Tally:
    """What one response stream has said so far besides its deltas."""

    info: ModelInfo
    finish: str | None = None
    served: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    reported_cost: float | None = None
    seen_blocks: dict[str, int] = field(default_factory=dict)
    calls: CallIndex = field(default_factory=CallIndex)
    refused: bool = False
    tap: RawTap | None = None
    _model: str | None = None
    normalized: FinishReason | None = None  # set by a native reader, which knows its provider's stop reasons

    def absorb(self, chunk: Any) -> list[StreamItem]:
        # LiteLLM keeps most chunk fields in pydantic's extra dict, where each attribute read goes through
        # `BaseModel.__getattr__` (~1.4 us); `model_extra` reads them in ~0.1 us (issue 14, item 5).
        model = chunk.model
        if model and model is not self._model:
            self._model, self.served = model, _qualify(self.info, model)
        extra = chunk.model_extra or {}
        usage = extra["usage"] if "usage" in extra else getattr(chunk, "usage", None)
        if usage is not None and (usage.prompt_tokens or usage.completion_tokens):
            self.input_tokens, self.output_tokens = usage.prompt_tokens or 0, usage.completion_tokens or 0
            self.reported_cost = getattr(usage, "cost", None)
        items = self._counted(self.tap.drain()) if self.tap is not None else []
        if not chunk.choices:
            return items
        choice = chunk.choices[0]
        self.finish = choice.finish_reason or self.finish
        blocks = None if self.tap is not None and self.tap.family == "anthropic" else self.seen_blocks
        return items + [self._placed(item) for item in delta_items(choice.delta, blocks)]

    def absorb_wire(self, chunk: dict[str, Any]) -> list[StreamItem]:
        """The same for a raw OpenAI `chat.completion.chunk` (see `openai_wire`)."""
        if chunk.get("model"):
            self.served = _qualify(self.info, chunk["model"])
        usage = chunk.get("usage")
        if usage and (usage.get("prompt_tokens") or usage.get("completion_tokens")):
            self.input_tokens, self.output_tokens = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
            self.reported_cost = usage.get("cost")
        choices = chunk.get("choices")
        if not choices:
            return []
        choice = choices[0]
        self.finish = choice.get("finish_reason") or self.finish
        delta = choice.get("delta") or {}
        items: list[StreamItem] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")  # DeepSeek, vLLM / OpenRouter, Groq
        if reasoning and isinstance(reasoning, str):
            items.append(ReasoningDelta(reasoning))
        if delta.get("content"):
            items.append(TextDelta(delta["content"]))
        if delta.get("refusal"):
            self.refused = True
            items.append(RefusalDelta(delta["refusal"]))
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            # the id as sent: packing a signature into it is LiteLLM's doing on its own path only
            delta_item = ToolCallDelta(0, call.get("id"), function.get("name"), function.get("arguments") or "")
            items.append(self.calls.place(delta_item, call.get("index")))
        return items

    def _placed(self, item: StreamItem) -> StreamItem:
        if isinstance(item, ToolCallDelta):
            return self.calls.place(item, item.index)
        if isinstance(item, RefusalDelta):
            self.refused = True
        return item

    def _counted(self, items: list[StreamItem]) -> list[StreamItem]:
        return [self._placed(item) for item in items]

    def absorb_tail(self) -> list[StreamItem]:
        """What the tap read after LiteLLM's last chunk; a stream without its end marker is cut here."""
        tap = self.tap
        assert tap is not None
        items = self._counted(tap.drain())
        if tap.error is not None:  # an in-band error LiteLLM let pass
            raise inband_error(tap.error, model=self.info.model)
        if tap.installed and tap.family in MARKED and not tap.ended:
            raise StreamCut(f"the {tap.family} stream ended without its end marker (cut short)")
        return items

    def end(self, model: ModelConfig, alias_model: str, provider: str, attempts: int) -> StreamEnd:
        raw = self.tap.raw_finish if self.tap is not None and self.tap.raw_finish else self.finish
        if self.tap is not None and self.tap.usage and not self.input_tokens:
            self.input_tokens, self.output_tokens = self.tap.usage  # LiteLLM dropped it with the missing finish_reason
        if self.tap is not None and self.tap.output_tokens is not None:
            self.output_tokens = self.tap.output_tokens
        return StreamEnd(
            finish_reason=raw,
            model=self.served,
            provider=provider,
            usage=StreamUsage(
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                cost=_cost(model, alias_model, self.input_tokens, self.output_tokens, self.reported_cost),
            ),
            attempts=attempts,
            finish=self.normalized or normalize_finish(raw, has_calls=self.calls.count > 0, refused=self.refused),
        )

    def __post_init__(self) -> None:
        self.served = self.served or self.info.model


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
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
        on_event: EventSink | None = None,
    ) -> AsyncIterator[StreamItem]:
        """Stream one model answer; on failure retry, then fall back along the chain. One generator over
        the requests, not one per layer: each item passes one fewer, and a waiting request holds less."""
        chain = tuple(self.config.fallback_chain(alias))  # of strings: the collector stops tracking it
        state = _Attempt()
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
                    async with aclosing(
                        self._one_request(current, model, info, messages, tools, extra, state)
                    ) as items:
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
        self,
        alias: str,
        model: ModelConfig,
        info: ModelInfo,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        extra: dict[str, Any] | None,
        state: _Attempt,
    ) -> AsyncGenerator[StreamItem, None]:
        places = self._in_flight.places(model.provider, self.config.providers[model.provider].max_in_flight)
        await places.acquire()  # before the request is built: a conversation waiting here holds little
        try:
            provider = self.config.resolve_provider(model.provider)
            kwargs = _request_kwargs(provider, model, info, messages, tools, extra)
            tally, size = _Tally(info), AnswerSize(model.max_answer_bytes)
            # One deadline for the gaps and the whole answer, moved per chunk (a wait_for per chunk costs
            # a task each); the gap's is lifted while the consumer holds an item.
            async with IdleDeadline(model.timeout, total=model.total_timeout) as deadline:
                deadline.waiting()  # from the request on: the first byte counts too
                chunks, absorb = await _open_stream(provider, model, info, kwargs, tally)
                try:
                    source = chunks.__aiter__()
                    while True:
                        deadline.waiting()
                        try:
                            chunk = await source.__anext__()
                        except StopAsyncIteration:
                            break
                        except Exception as exc:
                            if ended_despite(tally.tap, exc):
                                break
                            raise
                        deadline.holding()
                        for item in absorb(chunk):
                            clean_item(item)  # a lone surrogate would make the step unstorable
                            size.add(item)  # a flood stops here, on every path
                            yield item
                finally:
                    deadline.holding()
                    await _close(chunks)
        finally:
            places.release()
        if tally.tap is not None:
            for item in tally.absorb_tail():
                yield item
        yield tally.end(model, info.model, model.provider, state.number)

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


# -- native readers: Anthropic and Gemini (see anthropic_wire, gemini_wire) ---

_NativeStream = tuple[AsyncIterator[dict[str, Any]], Callable[[dict[str, Any]], list[StreamItem]]]
_Opened = tuple[AsyncIterator[Any], Callable[[Any], list[StreamItem]]]  # LiteLLM's stream yields its own chunks


async def _open_stream(
    provider: ResolvedProvider, model: ModelConfig, info: ModelInfo, kwargs: dict[str, Any], tally: _Tally
) -> _Opened:
    """The response stream and what reads its chunks into items: a runtime reader where the
    provider has one, else LiteLLM's stream (whose events the tally's tap observes)."""
    wire = provider.stream == "auto" and provider.type in WIRE_TYPES
    early = recall_request(kwargs) if wire and not _litellm_ready() else None
    cap = model.max_answer_bytes  # the runtime's readers also refuse one event larger than it could need
    if early is not None:  # LiteLLM still importing: the request it built last time (providers/request_memo.py)
        return stream_chunks(early, max_answer_bytes=cap), tally.absorb_wire
    _litellm()  # configured before any part of it is imported
    native = await _native_stream(provider, kwargs, tally, cap)
    if native is not None:
        return native
    if wire:
        return stream_chunks(build_request(kwargs, secrets=provider.secrets), max_answer_bytes=cap), tally.absorb_wire
    # LiteLLM's timeout covers the HTTP layer; the caller's deadline also bounds the first byte, every gap
    # between chunks and the whole answer, whatever transport (or mock).
    chunks = await _litellm().acompletion(**kwargs)
    tally.tap = tap_for(info, chunks)
    return chunks, tally.absorb


async def _native_stream(
    provider: ResolvedProvider, kwargs: dict[str, Any], tally: _Tally, cap: int
) -> _NativeStream | None:
    """The runtime's own reader for `type: anthropic` and `type: gemini`, unless the provider says
    `stream: litellm` or the request needs what only LiteLLM's stream does (see each module's `supports`).
    The reader knows its provider's stop reasons and usage; the tally copies them after each event."""
    reader: anthropic_wire.AnthropicReader | gemini_wire.GeminiReader
    if provider.stream != "auto":
        return None
    if provider.type == "anthropic" and anthropic_wire.supports(kwargs):
        request = anthropic_wire.build_request(kwargs)
        reader = anthropic_wire.AnthropicReader(request.tool_names)
        events = anthropic_wire.stream_events(request, max_answer_bytes=cap)
    elif provider.type == "gemini" and gemini_wire.supports(kwargs):
        reader = gemini_wire.GeminiReader()
        events = gemini_wire.stream_events(await gemini_wire.build_request(kwargs), max_answer_bytes=cap)
    else:
        return None

    def absorb(event: dict[str, Any]) -> list[StreamItem]:
        items = tally._counted(reader.feed(event))  # tool calls assembled by id, as on the other paths
        tally.finish, tally.normalized = reader.finish_reason, reader.finish
        tally.input_tokens, tally.output_tokens = reader.input_tokens, reader.output_tokens
        if reader.model and not tally.served.endswith(reader.model):
            tally.served = _qualify(tally.info, reader.model)
        return items

    return events, absorb


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
    provider: ResolvedProvider,
    model: ModelConfig,
    info: ModelInfo,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    extra: dict[str, Any] | None,
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        **provider.params,
        **model.params,
        **(extra or {}),
        "model": info.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "timeout": model.timeout,
        "max_retries": 0,
        "num_retries": 0,
        "drop_params": False,
    }
    if tools:
        kwargs["tools"] = tools
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
