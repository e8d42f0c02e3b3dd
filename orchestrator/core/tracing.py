"""OpenTelemetry spans, following the GenAI semantic conventions.

With the OpenTelemetry API installed (the `[otel]` extra), the runtime's spans
go to the global tracer provider: whatever exporter the host configured (OTLP
to Jaeger, Grafana Tempo, Phoenix, Langfuse, Logfire...) receives them. Without
it, the decorators below return the function they wrap unchanged, so tracing
costs nothing at all.

One conversation step is one trace:

    invoke_agent {agent}            an execution (gen_ai.conversation.id = the thread id)
      turn {side}                   one side's turn
        chat {model}                one model request: usage, finish reason, retries as events
        execute_tool {name}         one tool call; a prompt or agent called as a tool nests below it
          run_code {language}       a sandbox run

Message content is recorded only when `runtime.trace_content` is on, and
then redacted like every other output: its strings before they are serialised
to JSON (a secret holding a quote or a newline reads escaped in the dump). A
trace is the operator's output, like a log: every attribute, span status and
span event (an exception's message and stack too) is then redacted of every
secret known, as log lines are. The decorators read what they need from the
wrapped method's arguments and result, so the loop itself stays free of
tracing code.
"""

from __future__ import annotations

import functools
import json
import traceback
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from orchestrator.core.secrets import Redactor

try:
    from opentelemetry import context as _otel_context
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # the [otel] extra is not installed: every decorator is the identity
    _trace = None  # type: ignore[assignment]

__all__ = ["ENABLED", "add_event", "attach_context", "carrier", "chat", "code_run", "execution", "tool_call", "turn"]

ENABLED = _trace is not None
_NO_PROVIDER = (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider) if ENABLED else ()
P = ParamSpec("P")
R = TypeVar("R")
AsyncFn = Callable[P, Coroutine[Any, Any, R]]


def _tracer() -> Tracer:
    return _trace.get_tracer("orchestrator")  # a proxy until the host sets its provider, so ask each time


def _traced(
    name_of: Callable[..., str],
    before: Callable[..., Mapping[str, Any]],
    after: Callable[..., Mapping[str, Any]] | None = None,
    kind: str = "INTERNAL",
) -> Callable[[AsyncFn[P, R]], AsyncFn[P, R]]:
    """Wrap an async method in a span: `before(*args)` gives its attributes, `after(result, *args)` more."""

    def decorate(fn: AsyncFn[P, R]) -> AsyncFn[P, R]:
        if not ENABLED:
            return fn

        async def traced(*args: P.args, **kwargs: P.kwargs) -> R:
            span_kind = getattr(_trace.SpanKind, kind)
            # The SDK would record an exception's message and stack unredacted: `_failed` does it instead.
            with _tracer().start_as_current_span(
                name_of(*args, **kwargs), kind=span_kind, record_exception=False, set_status_on_exception=False
            ) as span:
                if span.is_recording():
                    span.set_attributes(_clean(before(*args, **kwargs)))
                try:
                    result = await fn(*args, **kwargs)
                except Exception as exc:  # as the SDK: BaseExceptions (a cancellation) are not errors
                    if span.is_recording():
                        _failed(span, exc)
                    raise
                if after is not None and span.is_recording():
                    span.set_attributes(_clean(after(result, *args, **kwargs)))
                return result

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
            # Until the host sets a tracer provider every span is a no-op, yet starting one
            # costs a dozen objects (generators, a context, a token) per level, held for the
            # whole execution: at 1,000 conversations in flight, that is work for every full
            # garbage collection. So the method runs bare, not even wrapped in a coroutine.
            if type(_trace.get_tracer_provider()) in _NO_PROVIDER:
                return fn(*args, **kwargs)
            return traced(*args, **kwargs)

        return wrapper

    return decorate


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """OpenTelemetry takes str, bool, int, float and lists of them; None means: leave it out.
    Strings are redacted as log lines are (traces go where logs go: to the operator)."""
    return {k: _redacted(v) for k, v in attributes.items() if v is not None}


def _redacted(value: Any) -> Any:
    from orchestrator.core.logs import redact_text  # structlog: loaded only once a span records

    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, (list, tuple)):
        return [redact_text(v) if isinstance(v, str) else v for v in value]
    return value


def _failed(span: Any, exc: Exception) -> None:
    """What the SDK records for an exception (the semantic conventions' `exception` event), redacted."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ in (None, "builtins") else f"{kind.__module__}.{kind.__qualname__}"
    event = {
        "exception.type": name,
        "exception.message": str(exc),
        "exception.stacktrace": "".join(traceback.format_exception(exc)),
        "exception.escaped": "True",
    }
    span.add_event("exception", _clean(event))
    span.set_status(_trace.Status(_trace.StatusCode.ERROR, _redacted(f"{kind.__name__}: {exc}")))


def add_event(name: str, **attributes: Any) -> None:
    """An event on the current span (a retry, a fallback), if one is recording; redacted like its attributes."""
    if ENABLED:
        span = _trace.get_current_span()
        if span.is_recording():
            span.add_event(name, _clean(attributes))


# -- trace context across processes ----------------------------------------------------


def carrier() -> dict[str, str]:
    """The current trace context as W3C headers, to send with a queued execution."""
    headers: dict[str, str] = {}
    if ENABLED:
        _propagate.inject(headers)
    return headers


@contextmanager
def attach_context(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Continue the trace `headers` came from (a worker running a queued execution)."""
    if not ENABLED or not headers:
        yield
        return
    token = _otel_context.attach(_propagate.extract(dict(headers)))
    try:
        yield
    finally:
        _otel_context.detach(token)


# -- the spans -------------------------------------------------------------------------
# Each takes the wrapped method's own arguments: (self, ...) of _Execution, Dispatcher or the sandbox.


def _execution_attrs(run: Any, person_message: str | None = None) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": run.agent.name,
        "gen_ai.conversation.id": run.thread.id,
        "orchestrator.flow_id": run.snapshot.flow_id,
        "orchestrator.agent.type": run.agent.type,
    }


def _execution_result(result: Any, run: Any, person_message: str | None = None) -> dict[str, Any]:
    return {
        "orchestrator.reason": result.reason,
        "orchestrator.stopped_by": result.stopped_by,
        "orchestrator.step_count": result.step_count,
        "gen_ai.usage.input_tokens": result.usage.input_tokens,
        "gen_ai.usage.output_tokens": result.usage.output_tokens,
    }


execution = _traced(lambda run, *a, **k: f"invoke_agent {run.agent.name}", _execution_attrs, _execution_result)

turn = _traced(
    lambda run, side, *a, **k: f"turn {side}",
    lambda run, side, *a, **k: {"orchestrator.side": side, "orchestrator.turn": run.snapshot.turn_count + 1},
    lambda reason, *a, **k: {"orchestrator.turn.end": reason},
)


def _chat_attrs(
    run: Any, side: str, prompt: Any, info: Any, toolset: Any, messages: list[dict[str, Any]], depth: int
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": info.provider_type,
        "gen_ai.request.model": info.model.partition("/")[2] or info.model,
        "gen_ai.conversation.id": run.thread.id,
        "orchestrator.model_alias": info.alias,
        "orchestrator.side": side,
        "orchestrator.depth": depth,
    }
    if run.services.settings.trace_content:
        attributes["gen_ai.input.messages"] = _content(run, messages)
    return attributes


def _content(run: Any, value: Any) -> str:
    """Content as JSON, its strings redacted before the dump (after it, a secret with a quote reads escaped)."""
    redactor: Redactor = run.services.redactor.for_thread(run.thread.id)
    return redactor.text(json.dumps(redactor.data(value), ensure_ascii=False, default=str))


def _chat_result(result: tuple[Any, Any], run: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    message, end = result
    attributes: dict[str, Any] = {
        "gen_ai.response.model": end.model.partition("/")[2] or end.model,
        "gen_ai.response.finish_reasons": [end.finish_reason] if end.finish_reason else None,
        "gen_ai.usage.input_tokens": end.usage.input_tokens,
        "gen_ai.usage.output_tokens": end.usage.output_tokens,
        "orchestrator.attempts": end.attempts,
    }
    if run.services.settings.trace_content:
        output = {"content": message.content, "tool_calls": [c.model_dump() for c in message.tool_calls or []]}
        attributes["gen_ai.output.messages"] = _content(run, output)
    return attributes


chat = _traced(
    lambda run, side, prompt, info, *a, **k: f"chat {info.model.partition('/')[2] or info.model}",
    _chat_attrs,
    _chat_result,
    kind="CLIENT",
)


def _call_of(args: tuple[Any, ...]) -> Any:
    """The ToolCall among a wrapped method's arguments (dispatch and nested calls take it in different places)."""
    return next(a for a in args if hasattr(a, "arguments") and hasattr(a, "id") and hasattr(a, "name"))


def _tool_attrs(*args: Any, **kwargs: Any) -> dict[str, Any]:
    call = _call_of(args)
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
    }


def _tool_result(outcome: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    result = outcome[0] if isinstance(outcome, tuple) else outcome
    if result.status == "error":
        span = _trace.get_current_span()  # redacted whole, then cut: a cut secret would no longer match
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, _redacted(result.error or "")[:200]))
        return {"error.type": "tool_error", "orchestrator.tool.status": "error"}
    return {"orchestrator.tool.status": "success"}


tool_call = _traced(lambda *a, **k: f"execute_tool {_call_of(a).name}", _tool_attrs, _tool_result)

code_run = _traced(
    lambda execution, *a, **k: f"run_code {execution.language}",
    lambda execution, *a, **k: {"orchestrator.sandbox.language": execution.language},
    lambda result, *a, **k: {"orchestrator.sandbox.status": getattr(result, "status", None)},
)
