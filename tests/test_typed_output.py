"""Typed answers (#47): `define_prompt(output=Model)` on OpenAI, Anthropic and Gemini, on both stream paths.

Each provider answers through respx with bytes in the shape of its recorded streams (tests/fixtures/), so
LiteLLM builds every request and the production reader (the runtime's wire reader, or LiteLLM's stream)
parses every answer; storage is real SQLite. Anthropic's typed requests always take LiteLLM's path (its
`response_format` becomes `output_format`, or a forced `json_tool_call` tool on older models, and LiteLLM
turns the tool's input back into text): both of those forms are covered.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from pydantic import BaseModel
from support import definitions

from orchestrator import Side, define_agent, define_prompt
from orchestrator.core.execution_result import OutputFailed
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict

REPO = Path(__file__).resolve().parents[1]


class City(BaseModel):
    name: str
    population: int | None = None


VALID = '{"name": "Paris", "population": 2100000}'
INVALID = '{"name": "Paris", "population": "many"}'
PARTS = 3  # each answer streams in this many pieces


def _pieces(text: str) -> list[str]:
    size = max(1, len(text) // PARTS)
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- each provider's bytes, in the shape of its recorded streams ------------------------------------------


def _openai(text: str, finish: str = "stop", refusal: str | None = None) -> bytes:
    def chunk(delta: dict[str, Any], reason: str | None = None) -> str:
        body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini"}
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": reason}]
        return f"data: {json.dumps(body)}\n\n"

    deltas = [{"refusal": refusal}] if refusal else [{"content": piece} for piece in _pieces(text)]
    body = "".join(chunk({"role": "assistant", **d}) for d in deltas) + chunk({}, finish)
    return (body + "data: [DONE]\n\n").encode()


def _sse(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _anthropic(text: str, stop: str = "end_turn", tool: bool = False) -> bytes:
    """A text answer (output_format), or with `tool` LiteLLM's forced `json_tool_call` tool's input."""
    start: dict[str, Any] = {"type": "text", "text": ""}
    if tool:
        start = {"type": "tool_use", "id": "toolu_01", "name": "json_tool_call", "input": {}}
    message = {"id": "msg_01", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5"}
    message |= {"stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 25, "output_tokens": 1}}
    events = [_sse("message_start", {"type": "message_start", "message": message})]
    events.append(_sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}))
    for piece in _pieces(text):
        delta = {"type": "input_json_delta", "partial_json": piece} if tool else {"type": "text_delta", "text": piece}
        events.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
    events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    stop_delta = {"stop_reason": stop, "stop_sequence": None}
    end = {"type": "message_delta", "delta": stop_delta, "usage": {"output_tokens": 9}}
    events += [_sse("message_delta", end), _sse("message_stop", {"type": "message_stop"})]
    return "".join(events).encode()


def _gemini(text: str, finish: str = "STOP") -> bytes:
    frames = []
    pieces = _pieces(text)
    for i, piece in enumerate(pieces):
        candidate: dict[str, Any] = {"content": {"parts": [{"text": piece}], "role": "model"}, "index": 0}
        if i == len(pieces) - 1:
            candidate["finishReason"] = finish
        usage = {"promptTokenCount": 8, "candidatesTokenCount": i + 1, "totalTokenCount": 9 + i}
        frames.append({"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash"})
    return "".join(f"data: {json.dumps(f)}\r\n\r\n" for f in frames).encode()


ANSWER: dict[str, Callable[[str], bytes]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "anthropic_tool": lambda text: _anthropic(text, stop="tool_use", tool=True),
    "gemini": _gemini,
}
CUT: dict[str, Callable[[str], bytes]] = {
    "openai": lambda text: _openai(text, finish="length"),
    "anthropic": lambda text: _anthropic(text, stop="max_tokens"),
    "anthropic_tool": lambda text: _anthropic(text, stop="max_tokens", tool=True),
    "gemini": lambda text: _gemini(text, finish="MAX_TOKENS"),
}
REFUSAL: dict[str, tuple[bytes, str]] = {  # the bytes, and the kind of failure they are
    "openai": (_openai("", refusal="I can't help with that."), "refused"),
    "anthropic": (_anthropic("I can", stop="refusal"), "refused"),
    "anthropic_tool": (_anthropic("I can", stop="refusal"), "refused"),
    "gemini": (_gemini("Here is how", finish="SAFETY"), "filtered"),  # Gemini's nearest: its safety filter
}
URLS = {
    "openai": "https://api.openai.com/v1/chat/completions",
    "anthropic": "https://api.anthropic.com/v1/messages",
    "gemini": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent",
}
MODELS = {
    "openai": ("openai", "gpt-4o-mini"),
    "anthropic": ("anthropic", "claude-sonnet-4-5"),  # LiteLLM: output_format (structured outputs)
    "anthropic_tool": ("anthropic", "claude-3-5-haiku-20241022"),  # LiteLLM: a forced json_tool_call tool
    "gemini": ("gemini", "gemini-2.5-flash"),
}
# (answer shape, stream path): Anthropic's typed requests take LiteLLM's path whatever the setting
CASES = [
    ("openai", "auto"),
    ("openai", "litellm"),
    ("anthropic", "auto"),
    ("anthropic_tool", "auto"),
    ("gemini", "auto"),
    ("gemini", "litellm"),
]
KEYS = {"openai": "sk-openai-test-0000000000", "anthropic": "sk-ant-test-0000000000", "gemini": "gemini-test-0000000"}


class Typed:
    """A runtime whose side a prompt `city` answers `City` on one provider; `sent` holds each request's bytes."""

    def __init__(self, runtime: Runtime, sent: list[bytes]) -> None:
        self.runtime = runtime
        self.sent = sent

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(body) for body in self.sent]


@pytest.fixture
async def typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[..., Any]]:
    for name, key in KEYS.items():
        monkeypatch.setenv(f"{name.upper()}_API_KEY", key)
    router = respx.mock(assert_all_called=False)
    router.start()
    runtimes: list[Runtime] = []

    async def make(shape: str, stream: str, bodies: list[bytes], **prompt: Any) -> Typed:
        provider, model = MODELS[shape]
        replies = iter(bodies)
        sent: list[bytes] = []

        def reply(request: httpx.Request) -> httpx.Response:
            sent.append(request.content)
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=next(replies))

        router.post(url__startswith=URLS[provider]).mock(side_effect=reply)
        city = define_prompt(prompt="You know cities.", tool_description="cities", output=City, **prompt)
        defs = definitions(prompts={"city": city}, agents={"chat": define_agent(type="ai_human", side_a=Side("city"))})
        config = {
            "providers": {provider: {"api_key": f"${{{provider.upper()}_API_KEY}}", "stream": stream}},
            "models": {
                "m": {"provider": provider, "model": model, "params": {"max_tokens": 256}, "retry": {"attempts": 1}}
            },
            "default_model": "m",
        }
        storage = SQLiteStorage(str(tmp_path / f"t{len(runtimes)}.db"))
        runtime = Runtime(defs, config=config_from_dict(config), storage=storage, settings=RuntimeSettings())
        await runtime.open()
        runtimes.append(runtime)
        return Typed(runtime, sent)

    try:
        yield make
    finally:
        for runtime in runtimes:
            await runtime.close()
        router.stop()


async def _assistants(runtime: Runtime, thread_id: str) -> list[Any]:
    page = await runtime.storage.get_messages(thread_id, limit=100)
    return [m for m in page.messages if m.role == "assistant"]


@pytest.mark.parametrize(("shape", "stream"), CASES)
async def test_a_valid_answer_is_the_typed_value_and_its_json_text_is_kept(typed, shape, stream):
    t = await typed(shape, stream, [ANSWER[shape](VALID)])
    thread = await t.runtime.create_thread("chat")
    result = await thread.send("The capital of France?", output=City)
    assert result.output == City(name="Paris", population=2100000)
    [stored] = await _assistants(t.runtime, thread.id)
    assert json.loads(stored.content) == json.loads(VALID)  # the text as the model wrote it
    assert stored.metadata["output"] == {"name": "Paris", "population": 2100000}
    assert len(t.sent) == 1


@pytest.mark.parametrize(("shape", "stream"), CASES)
async def test_an_invalid_answer_is_corrected_on_the_second_try(typed, shape, stream):
    t = await typed(shape, stream, [ANSWER[shape](INVALID), ANSWER[shape](VALID)])
    thread = await t.runtime.create_thread("chat")
    result = await thread.send("The capital of France?")
    assert result.output == City(name="Paris", population=2100000)
    first, second = t.requests()
    retry = json.dumps(second)
    assert "population: Input should be a valid integer" in retry and "valid integer" not in json.dumps(first)
    bad, good = await _assistants(t.runtime, thread.id)
    assert bad.metadata["output_errors"] == [
        "population: Input should be a valid integer, unable to parse string as an integer"
    ]
    assert "output" not in bad.metadata and good.metadata["output"]["population"] == 2100000


@pytest.mark.parametrize(("shape", "stream"), CASES)
async def test_an_answer_that_stays_invalid_fails_naming_the_prompt_and_fields(typed, shape, stream):
    t = await typed(shape, stream, [ANSWER[shape](INVALID), ANSWER[shape]('{"population": 3}')])
    thread = await t.runtime.create_thread("chat")
    with pytest.raises(OutputFailed) as info:
        await thread.send("The capital of France?")
    assert info.value.prompt == "city" and info.value.kind == "invalid"
    assert info.value.fields == ["name: Field required"]
    assert str(info.value) == "prompt 'city' answered with a value that is not its output type: name: Field required"
    assert info.value.result.reason == "output_failed" and info.value.result.output == '{"population": 3}'
    assert (await t.runtime.storage.get_thread(thread.id)).status == "failed"
    assert len(t.sent) == 2  # output_retries=1: one correction, then the failure


@pytest.mark.parametrize(("shape", "stream"), CASES)
async def test_a_refusal_is_reported_never_parsed(typed, shape, stream):
    body, kind = REFUSAL[shape]
    t = await typed(shape, stream, [body])
    thread = await t.runtime.create_thread("chat")
    with pytest.raises(OutputFailed) as info:
        await thread.send("Something it will not do")
    assert info.value.kind == kind and info.value.fields == [] and len(t.sent) == 1  # no correction asked
    result = info.value.result
    assert result.finish == ("refusal" if kind == "refused" else "content_filter")
    [stored] = await _assistants(t.runtime, thread.id)
    assert "output" not in stored.metadata and "output_errors" not in stored.metadata


@pytest.mark.parametrize(("shape", "stream"), CASES)
async def test_a_cut_answer_is_reported_as_truncated_never_parsed(typed, shape, stream):
    t = await typed(shape, stream, [CUT[shape](VALID[:20])])
    thread = await t.runtime.create_thread("chat")
    with pytest.raises(OutputFailed) as info:
        await thread.send("The capital of France?")
    assert info.value.kind == "truncated" and info.value.result.truncated and len(t.sent) == 1
    assert "cut by the token limit" in str(info.value)
    [stored] = await _assistants(t.runtime, thread.id)
    assert stored.finish == "length" and "output_errors" not in stored.metadata


async def test_output_retries_bounds_the_corrections(typed):
    t = await typed("openai", "auto", [_openai(INVALID)] * 3 + [_openai(VALID)], output_retries=3)
    thread = await t.runtime.create_thread("chat")
    result = await thread.send("The capital of France?", output=City)
    assert result.output is not None and result.output.population == 2100000 and len(t.sent) == 4


# -- the request: the schema in each provider's form, the bytes LiteLLM's own call sends -------------------

RESPONSE_FORMAT = {
    "openai": {
        "type": "json_schema",
        "json_schema": {
            "name": "City",
            "schema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "population": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                },
                "required": ["name", "population"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    },
    "anthropic": {
        "type": "json_schema",
        "json_schema": {
            "name": "City",
            "schema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "population": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
                },
                "required": ["name"],
            },
        },
    },
    "gemini": {
        "type": "json_schema",
        "json_schema": {
            "name": "City",
            "schema": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "population": {"type": "integer", "nullable": True}},
                "required": ["name"],
            },
        },
    },
}


def _provider_form(shape: str, body: dict[str, Any]) -> Any:
    """Where each provider's request carries the schema."""
    if shape == "openai":
        return body["response_format"]["json_schema"]["strict"], body["response_format"]["json_schema"]["schema"]
    if shape == "anthropic":
        return body["output_format"]["type"], body["output_format"]["schema"]["required"]
    if shape == "anthropic_tool":
        return body["tool_choice"], [tool["name"] for tool in body["tools"]]
    config = body["generationConfig"]
    return config["response_mime_type"], config["response_json_schema"]


FORMS = {
    "openai": (True, RESPONSE_FORMAT["openai"]["json_schema"]["schema"]),
    "anthropic": ("json_schema", ["name"]),
    "anthropic_tool": ({"name": "json_tool_call", "type": "tool"}, ["json_tool_call"]),
    "gemini": ("application/json", RESPONSE_FORMAT["gemini"]["json_schema"]["schema"]),  # the dialect's form
}


@pytest.mark.parametrize(("shape", "stream"), CASES)
async def test_the_request_equals_litellms_for_the_same_response_format(typed, shape, stream):
    from providers.client import _litellm  # the module LiteLLM is configured in (offline, httpx transport)

    t = await typed(shape, stream, [ANSWER[shape](VALID), ANSWER[shape](VALID)])
    thread = await t.runtime.create_thread("chat")
    await thread.send("The capital of France?")
    ours = t.requests()[0]
    assert _provider_form(shape, ours) == FORMS[shape]
    provider, model = MODELS[shape]
    messages = [
        {"role": "system", "content": "You know cities."},
        {"role": "user", "content": "The capital of France?"},
    ]
    stream_of = await _litellm().acompletion(
        model=f"{provider}/{model}",
        messages=messages,
        response_format=RESPONSE_FORMAT[shape.removesuffix("_tool")],
        stream=True,
        max_tokens=256,
        api_key=KEYS[provider],
        **({"stream_options": {"include_usage": True}} if provider == "openai" else {}),
    )
    async for _ in stream_of:  # Gemini's request goes out at the first read
        pass
    theirs = t.requests()[1]
    assert ours == theirs
    if (shape, stream) != ("openai", "auto"):  # the OpenAI wire's own builder orders the body's keys as its template
        assert t.sent[0] == t.sent[1]


async def test_prompted_mode_asks_in_the_system_prompt_and_sends_no_response_format(typed):
    t = await typed("openai", "auto", [_openai("```json\n" + VALID + "\n```")], output_mode="prompted")
    thread = await t.runtime.create_thread("chat")
    result = await thread.send("The capital of France?", output=City)
    assert result.output == City(name="Paris", population=2100000)
    [request] = t.requests()
    assert "response_format" not in request
    assert "matching this JSON schema" in request["messages"][0]["content"]


# -- definitions -----------------------------------------------------------------------------------------


def test_output_accepts_any_type_adapter_type_and_wraps_non_objects():
    from typing import Literal

    listed = define_prompt(prompt="p", tool_description="d", output=list[City]).output_spec
    assert listed is not None and listed.wrapped and listed.name == "output"
    value, as_json = listed.parse('{"response": [{"name": "Rome"}]}', "anthropic")
    assert value == [City(name="Rome")] and as_json == [{"name": "Rome", "population": None}]
    answer = define_prompt(prompt="p", tool_description="d", output=Literal["yes", "no"]).output_spec
    assert answer is not None and answer.parse('{"response": "yes"}', "openai")[0] == "yes"


def test_a_bad_output_or_mode_is_refused_naming_the_field():
    from orchestrator.definitions.define import DefinitionError

    with pytest.raises(DefinitionError, match="'output' must be a type pydantic can validate"):
        define_prompt(prompt="p", tool_description="d", output=object())
    with pytest.raises(DefinitionError, match="'output_mode' must be one of"):
        define_prompt(prompt="p", tool_description="d", output=City, output_mode="json")  # type: ignore[arg-type]


# -- the offline `test` model ----------------------------------------------------------------------------


async def test_the_test_model_answers_a_valid_instance_of_the_example_schema(tmp_path):
    runtime = Runtime.from_path(
        str(REPO / "agents"),
        config=str(REPO / "configs/default.yaml"),
        storage=f"sqlite:///{tmp_path}/t.db",
        model="test",
    )
    async with runtime:
        output = runtime.definitions.prompts["order_status"].output
        thread = await runtime.create_thread("order_status_chat")
        result = await thread.send("Where is order A1002?", output=output)
        assert isinstance(result.output, output) and result.step_count == 2  # its tool once, then the value


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_test_model_answers_any_output_type_validly(seed):
    from typing import Literal

    from providers.test_model import TestModel

    class Trip(BaseModel):
        stops: list[City]
        mode: Literal["rail", "road"] | None = None
        nights: dict[str, int] = {}

    for output in (City, Trip, list[City], Literal["yes", "no"], int | str):
        spec = define_prompt(prompt="p", tool_description="d", output=output).output_spec
        assert spec is not None
        body = {"messages": [{"role": "user", "content": "hi"}], "seed": seed}
        body |= spec.request("openai", "native").extra
        answer = TestModel()(body)
        spec.parse(answer.text, "openai")  # raises OutputInvalid if it is not the type
