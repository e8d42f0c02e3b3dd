"""ModelClient over real LiteLLM, served at the HTTP level by scripted models."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from providers.client import ModelClient, UsageMeter
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedFault, ScriptedModel, ScriptedResponse
from providers.stream import ProviderError, StreamEnd, StreamRestart, TextDelta, ToolCallDelta

KEY_A = "sk-test-primary-0123456789abcdef"
KEY_B = "sk-test-backup-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {"name": name, "description": name, "parameters": {"type": "object", "properties": {}}},
    }
    for name in ("lookup", "notify")
]


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("PRIMARY_KEY", KEY_A)
    monkeypatch.setenv("BACKUP_KEY", KEY_B)


def make_config(attempts: int = 3, max_wait: float = 30, price: dict | None = None) -> Any:
    return config_from_dict(
        {
            "providers": {
                "primary": {"type": "openai", "api_key": "${PRIMARY_KEY}", "base_url": "http://primary.invalid/v1"},
                "backup": {"type": "openai", "api_key": "${BACKUP_KEY}", "base_url": "http://backup.invalid/v1"},
                "nokey": {"type": "openai", "api_key": "${NOKEY_API_KEY}", "base_url": "http://nokey.invalid/v1"},
                "anthropic": {"api_key": "${BACKUP_KEY}"},
            },
            "models": {
                "main": {
                    "provider": "primary",
                    "model": "gpt-4o-mini",
                    "fallbacks": ["spare"],
                    "retry": {"attempts": attempts, "backoff": 0.5, "max_wait": max_wait},
                    **({"price": price} if price else {}),
                },
                "spare": {"provider": "backup", "model": "gpt-4o", "retry": {"attempts": 1}},
                "solo": {
                    "provider": "primary",
                    "model": "gpt-4o-mini",
                    "retry": {"attempts": attempts, "max_wait": max_wait},
                },
                "unkeyed": {"provider": "nokey", "model": "gpt-4o-mini"},
                "claude": {"provider": "anthropic", "model": "claude-sonnet-4-5", "params": {"max_tokens": 64}},
            },
            "default_model": "main",
        }
    )


class FakeClock:
    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.sleeps.append(seconds)


async def collect(client: ModelClient, alias: str | None = None, **kwargs: Any) -> list[Any]:
    return [item async for item in client.stream(alias, MESSAGES, **kwargs)]


def text_of(items: list[Any]) -> str:
    return "".join(i.text for i in items if isinstance(i, TextDelta))


@pytest.fixture
def primary():
    def serve(script: list[Any]) -> ScriptedModel:
        model = ScriptedModel(script)
        stack.append(model.serving("http://primary.invalid/v1"))
        stack[-1].__enter__()
        return model

    stack: list[Any] = []
    yield serve
    for ctx in reversed(stack):
        ctx.__exit__(None, None, None)


async def test_text_stream_with_usage_and_price():
    model = ScriptedModel([ScriptedResponse(text="Hello there, friend.", usage=(1000, 2000))])
    with model.serving("http://primary.invalid/v1"):
        items = await collect(ModelClient(make_config(price={"input": 1.0, "output": 2.0})))
    assert text_of(items) == "Hello there, friend."
    assert len([i for i in items if isinstance(i, TextDelta)]) == 3  # chunk_size 8
    end = items[-1]
    assert isinstance(end, StreamEnd)
    assert (end.finish_reason, end.model, end.provider, end.attempts) == ("stop", "openai/gpt-4o-mini", "primary", 1)
    assert (end.usage.input_tokens, end.usage.output_tokens) == (1000, 2000)
    assert end.usage.cost == pytest.approx(0.005)
    body = model.requests[0]
    assert body["model"] == "gpt-4o-mini" and body["messages"] == MESSAGES and body["stream"] is True
    meter = UsageMeter()
    meter.add(end)
    assert meter.input_tokens == 1000 and meter.cost == pytest.approx(0.005)


async def test_cost_from_litellm_cost_map_without_price():
    with ScriptedModel([ScriptedResponse(text="x", usage=(1_000_000, 0))]).serving("http://primary.invalid/v1"):
        items = await collect(ModelClient(make_config()))
    assert items[-1].usage.cost == pytest.approx(0.15)  # gpt-4o-mini input, local cost map


async def test_parallel_tool_calls_are_streamed_by_index():
    script = [
        ScriptedResponse(
            text="", tool_calls=[ScriptedCall("lookup", {"order_id": "A-1"}), ScriptedCall("notify", {"to": "ops"})]
        )
    ]
    model = ScriptedModel(script)
    with model.serving("http://primary.invalid/v1"):
        items = await collect(ModelClient(make_config()), tools=TOOLS, extra={"parallel_tool_calls": True})
    calls = [i for i in items if isinstance(i, ToolCallDelta)]
    firsts = [c for c in calls if c.id]
    assert [(c.index, c.id, c.name) for c in firsts] == [(0, "call_01_0", "lookup"), (1, "call_01_1", "notify")]
    args = {i: "".join(c.arguments for c in calls if c.index == i) for i in (0, 1)}
    assert args == {0: '{"order_id": "A-1"}', 1: '{"to": "ops"}'}
    assert items[-1].finish_reason == "tool_calls"
    assert [t["function"]["name"] for t in model.requests[0]["tools"]] == ["lookup", "notify"]
    assert model.requests[0]["parallel_tool_calls"] is True


async def test_retry_after_server_error_then_success():
    clock = FakeClock()
    model = ScriptedModel([ScriptedFault(500), ScriptedFault(503), ScriptedResponse(text="ok")])
    with model.serving("http://primary.invalid/v1"):
        items = await collect(ModelClient(make_config(), sleep=clock), "solo")
    assert text_of(items) == "ok" and items[-1].attempts == 3
    assert clock.sleeps == [0.5, 1.0]  # exponential backoff from the policy
    assert len(model.requests) == 3
    assert not any(isinstance(i, StreamRestart) for i in items)  # nothing was yielded before


async def test_anthropic_overloaded_529_is_retried():
    clock = FakeClock()
    model = ScriptedModel([ScriptedFault(529, message="Overloaded"), ScriptedResponse(text="ok")], wire="anthropic")
    with model.serving():
        items = await collect(ModelClient(make_config(), sleep=clock), "claude")
    assert text_of(items) == "ok" and clock.sleeps == [0.5] and len(model.requests) == 2


async def test_malformed_sse_line_is_retried():
    clock = FakeClock()
    model = ScriptedModel([ScriptedResponse(text="garbled", malformed=True), ScriptedResponse(text="clean")])
    with model.serving("http://primary.invalid/v1"):
        items = await collect(ModelClient(make_config(), sleep=clock), "solo")
    assert text_of(items) == "clean" and len(model.requests) == 2


@pytest.mark.parametrize(("header", "max_wait", "expected"), [("2", 30, 2.0), ("120", 10, 10.0)])
async def test_retry_after_is_honoured_and_capped(header, max_wait, expected):
    clock = FakeClock()
    model = ScriptedModel([ScriptedFault(429, headers={"retry-after": header}), ScriptedResponse(text="ok")])
    with model.serving("http://primary.invalid/v1"):
        items = await collect(ModelClient(make_config(max_wait=max_wait), sleep=clock), "solo")
    assert text_of(items) == "ok"
    assert clock.sleeps == [expected]


async def test_no_retry_on_401_names_provider_and_variable_never_the_key():
    clock = FakeClock()
    model = ScriptedModel([ScriptedFault(401, message=f"Incorrect API key provided: {KEY_A}")] * 3)
    with model.serving("http://primary.invalid/v1"), pytest.raises(ProviderError) as info:
        await collect(ModelClient(make_config(), sleep=clock), "solo")
    error = info.value
    assert len(model.requests) == 1 and clock.sleeps == []
    assert (error.kind, error.status, error.retryable, error.provider) == ("auth", 401, False, "primary")
    assert "'primary'" in str(error) and "PRIMARY_KEY" in str(error)
    assert KEY_A not in str(error) and KEY_A[:12] not in str(error)


async def test_key_echoed_in_error_body_is_scrubbed():
    model = ScriptedModel([ScriptedFault(400, message=f"invalid request for key {KEY_A}")])
    with model.serving("http://primary.invalid/v1"), pytest.raises(ProviderError) as info:
        await collect(ModelClient(make_config()), "solo")
    assert info.value.kind == "bad_request" and info.value.status == 400
    assert KEY_A not in str(info.value) and "invalid request" in str(info.value)
    assert len(model.requests) == 1


async def test_fallback_to_second_model_emits_event():
    clock = FakeClock()
    events: list[tuple[str, dict]] = []
    first = ScriptedModel([ScriptedFault(500)] * 2)
    second = ScriptedModel([ScriptedResponse(text="from backup")])
    with first.serving("http://primary.invalid/v1"), second.serving("http://backup.invalid/v1"):
        items = await collect(
            ModelClient(make_config(attempts=2), sleep=clock), "main", on_event=lambda n, d: events.append((n, d))
        )
    assert text_of(items) == "from backup"
    assert len(first.requests) == 2 and second.requests[0]["model"] == "gpt-4o"
    assert [(n, d["from"], d["to"]) for n, d in events] == [("model_fallback", "main", "spare")]
    assert "500" in events[0][1]["error"] or "InternalServerError" in events[0][1]["error"]
    end = items[-1]
    assert (end.provider, end.model, end.attempts) == ("backup", "openai/gpt-4o", 3)


async def test_all_models_fail_raises_provider_error_for_the_chain():
    first = ScriptedModel([ScriptedFault(400, message="first says no")])
    second = ScriptedModel([ScriptedFault(404, message="second not found")])
    with first.serving("http://primary.invalid/v1"), second.serving("http://backup.invalid/v1"):
        with pytest.raises(ProviderError) as info:
            await collect(ModelClient(make_config(), sleep=FakeClock()), "main")
    assert info.value.kind == "not_found" and info.value.status == 404
    assert "first says no" in str(info.value) and "second not found" in str(info.value)


async def test_stream_cut_midway_yields_restart_then_full_answer():
    clock = FakeClock()
    model = ScriptedModel(
        [ScriptedResponse(text="partial answer that breaks", cut_after=3), ScriptedResponse(text="whole answer")]
    )
    with model.serving("http://primary.invalid/v1"):
        items = await collect(ModelClient(make_config(), sleep=clock), "solo")
    restarts = [i for i, item in enumerate(items) if isinstance(item, StreamRestart)]
    assert len(restarts) == 1
    before, after = items[: restarts[0]], items[restarts[0] + 1 :]
    assert text_of(before) == "partial answer t"  # two text events arrived before the cut
    assert items[restarts[0]] == StreamRestart(attempt=2, reason="retry", model="openai/gpt-4o-mini")
    assert text_of(after) == "whole answer" and after[-1].attempts == 2
    assert clock.sleeps == [0.5]


async def test_missing_env_var_is_reported_when_used():
    with pytest.raises(ProviderError) as info:
        await collect(ModelClient(make_config()), "unkeyed")
    assert info.value.kind == "config"
    assert "NOKEY_API_KEY" in str(info.value) and "'nokey'" in str(info.value)


async def test_cancellation_closes_the_http_stream():
    model = ScriptedModel([ScriptedResponse(text="first words then silence", hang_after=2)])
    got_text = asyncio.Event()
    seen: list[Any] = []

    async def consume() -> None:
        async for item in ModelClient(make_config()).stream("solo", MESSAGES):
            seen.append(item)
            got_text.set()

    with model.serving("http://primary.invalid/v1"):
        task = asyncio.create_task(consume())
        await asyncio.wait_for(got_text.wait(), 10)
        assert model.streams_opened == 1 and model.streams_closed == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert text_of(seen) == "first wo"
    assert model.streams_closed == 1


async def test_breaking_off_early_closes_the_http_stream():
    model = ScriptedModel([ScriptedResponse(text="a long answer we stop reading")])
    with model.serving("http://primary.invalid/v1"):
        stream = ModelClient(make_config()).stream("solo", MESSAGES)
        first = await stream.__anext__()
        await stream.aclose()
    assert isinstance(first, TextDelta) and model.streams_closed == 1


async def test_restart_on_fallback_after_partial_output():
    events: list[str] = []
    first = ScriptedModel([ScriptedResponse(text="half of an answer", cut_after=3)])
    second = ScriptedModel([ScriptedResponse(text="backup answer")])
    with first.serving("http://primary.invalid/v1"), second.serving("http://backup.invalid/v1"):
        items = await collect(ModelClient(make_config(attempts=1)), "main", on_event=lambda n, d: events.append(n))
    restart = next(i for i in items if isinstance(i, StreamRestart))
    assert restart == StreamRestart(attempt=2, reason="fallback", model="openai/gpt-4o")
    assert text_of(items[items.index(restart) + 1 :]) == "backup answer"
    assert events == ["model_fallback"]


async def test_silent_stream_hits_the_read_timeout():
    config = make_config(attempts=1)
    config.models["solo"].timeout = 0.05
    model = ScriptedModel([ScriptedResponse(text="starts then stalls", hang_after=2)])
    with model.serving("http://primary.invalid/v1"), pytest.raises(ProviderError) as info:
        await collect(ModelClient(config), "solo")
    assert info.value.kind == "timeout" and info.value.retryable
    assert model.streams_closed == 1


async def test_a_hosts_litellm_callbacks_still_fire_after_a_runtime_opens(monkeypatch, tmp_path):
    """The runtime configures LiteLLM per call; it must not clear the host's Langfuse/OTel/cost callbacks.

    LiteLLM is configured on the first model call of a process (or a runtime's first open): both are
    made here with the configuration reset, so the test does not depend on what ran before it."""
    import litellm
    from litellm.integrations.custom_logger import CustomLogger
    from support import definitions

    import providers.client as client_module
    from orchestrator.runtime import Runtime
    from orchestrator.storage.sqlite import SQLiteStorage

    seen: list[str] = []

    class HostLogger(CustomLogger):
        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            seen.append(kwargs.get("model"))

    def host_success(kwargs, response, start, end):
        seen.append("success_callback")

    host = HostLogger()
    monkeypatch.setattr(litellm, "callbacks", [host])
    monkeypatch.setattr(litellm, "success_callback", [host_success])
    monkeypatch.setattr(litellm, "failure_callback", [host_success])
    monkeypatch.setattr(client_module, "_LITELLM", None)  # configure LiteLLM again, as in a fresh process
    models = {"demo": {"provider": "scripted", "model": "demo"}}
    config = config_from_dict({"providers": {"scripted": {"type": "scripted", "stream": "litellm"}}, "models": models})
    runtime = Runtime(definitions(), config=config, storage=SQLiteStorage(str(tmp_path / "db")))
    await runtime.open()
    try:
        with ScriptedModel([ScriptedResponse(text="hi")]).serving():
            _ = [i async for i in ModelClient(config).stream("demo", [{"role": "user", "content": "hi"}])]
        # LiteLLM itself copies `callbacks` into the other lists on a call: what matters is that none is gone
        assert host in litellm.callbacks and host_success in litellm.success_callback
        assert host_success in litellm.failure_callback
        hi = [{"role": "user", "content": "hi"}]
        await litellm.acompletion(model="openai/gpt-4o-mini", messages=hi, mock_response="hello")
        for _ in range(500):  # LiteLLM logs from a task of its own
            if "gpt-4o-mini" in seen:
                break
            await asyncio.sleep(0)
        assert "gpt-4o-mini" in seen
    finally:
        await runtime.close()


async def test_an_answer_at_the_first_attempt_leaves_no_retry_machinery_for_the_collector():
    """tenacity's retrying loop leaves some 30 objects in a reference cycle per request: at 1,000
    conversations that was garbage every full collection walked. It is built at the first failure."""
    import gc

    client = ModelClient(make_config())
    with ScriptedModel([ScriptedResponse(text="Hello there")] * 2).serving("http://primary.invalid/v1"):
        await collect(client, "solo")  # warm: LiteLLM's first-request setup is not the request's garbage
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            items = await collect(client, "solo")
            gc.collect()
            retry_garbage = [o for o in gc.garbage if type(o).__module__.startswith("tenacity")]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert text_of(items) == "Hello there" and items[-1].attempts == 1
    assert retry_garbage == []
