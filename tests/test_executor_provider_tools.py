"""What reaches the provider besides text, end to end through LiteLLM.

Provider-executed tools: the native tool goes out in the request, the provider
runs it, its blocks come back in the stream and are replayed to the provider
on the next request; nothing runs locally. Tool attachments: stored in the
thread's files, then sent as image parts (image models) or named in a note.

Anthropic's side is served with hand-written SSE in the documented streaming
format (a `server_tool_use` block whose input streams as `input_json_delta`,
then a `web_search_tool_result` block, then text): the scripted model cannot
produce server-tool blocks.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from pydantic import BaseModel
from support import definitions

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.definitions.define import DefinitionError, ToolAttachment
from orchestrator.runtime import Runtime
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall
ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
SEARCH_ID = "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE"
SEARCH_RESULTS = [
    {
        "type": "web_search_result",
        "title": "Oslo weather forecast",
        "url": "https://www.yr.no/en/forecast/daily-table/1-72837/Norway/Oslo/Oslo/Oslo",
        "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2QSDP",
        "page_age": "November 29, 2026",
    }
]
RAN: list[str] = []
# A 1x1 RGBA PNG (70 bytes; chunk CRCs and zlib data valid).
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
PNG = base64.b64decode(PNG_B64)


class Q(BaseModel):
    q: str = ""


async def _never(state: Any, args: Q) -> ToolResult:
    RAN.append("web_search")
    return ToolResult.ok("ran locally")


async def _lookup(state: Any, args: Q) -> ToolResult:
    RAN.append("lookup")
    return ToolResult.ok(f"found {args.q}")


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def _message_start(n: int, input_tokens: int = 2679) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": f"msg_01XFDUDYJgAACzvnptvVoYE{n}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 3},
        },
    }


def _text_block(index: int, text: str) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text[i : i + 7]}}
            for i in range(0, len(text), 7)
        ),
        {"type": "content_block_stop", "index": index},
    ]


def _end(stop_reason: str, output_tokens: int, searches: int = 0) -> list[dict[str, Any]]:
    usage: dict[str, Any] = {"output_tokens": output_tokens}
    if searches:
        usage["server_tool_use"] = {"web_search_requests": searches}
    return [
        {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": usage},
        {"type": "message_stop"},
    ]


SEARCH_THEN_TEXT = _sse(
    _message_start(1),
    {"type": "ping"},
    {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "server_tool_use", "id": SEARCH_ID, "name": "web_search", "input": {}},
    },
    {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}},
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '{"query": "weat'},
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": 'her Oslo today"}'},
    },
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "web_search_tool_result", "tool_use_id": SEARCH_ID, "content": SEARCH_RESULTS},
    },
    {"type": "content_block_stop", "index": 1},
    *_text_block(2, "It is sunny in Oslo today."),
    *_end("end_turn", 510, searches=1),
)
PLAIN_TEXT = _sse(_message_start(2, 3100), *_text_block(0, "Rain is likely tomorrow."), *_end("end_turn", 12))


def _defs(model: str, provider: str, tools: tuple[str, ...] = ("web_search", "lookup")):
    tool_defs = {
        "web_search": define_tool(
            description="Search the web", args=Q, execute=_never, execution_mode="provider", execution_provider=provider
        ),
        "lookup": define_tool(description="Look something up", args=Q, execute=_lookup),
    }
    prompts = {
        "pa": define_prompt(prompt="You answer questions.", tool_description="answers", tools=tools, model=model)
    }
    return definitions(
        tools=tool_defs, prompts=prompts, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))}
    )


CONFIG: dict[str, Any] = {
    "providers": {"anthropic": {"api_key": "${ANTHROPIC_API_KEY}"}, "openai": {"api_key": "${OPENAI_API_KEY}"}},
    "models": {
        "claude": {
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "retry": {"attempts": 1},
            "params": {"max_tokens": 1024},
        },
        "gpt": {"provider": "openai", "model": "gpt-4o-search-preview", "retry": {"attempts": 1}},
    },
    "default_model": "claude",
}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-provider-tools-0000")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-provider-tools-00000000")
    RAN.clear()


@pytest.fixture
async def runtime_for(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    opened: list[Runtime] = []

    async def factory(defs: Any) -> Runtime:
        runtime = Runtime(
            defs, config=config_from_dict(CONFIG), storage=SQLiteStorage(str(tmp_path / f"p{len(opened)}.db"))
        )
        opened.append(runtime)
        return await runtime.open()

    yield factory
    for runtime in opened:
        await runtime.close()


async def _search_conversation(runtime_for: Any) -> tuple[list[dict[str, Any]], Any, tuple[str | None, str | None]]:
    """Two turns on Anthropic: a web search answered by the provider, then a follow-up."""
    bodies: list[dict[str, Any]] = []
    answers = [SEARCH_THEN_TEXT, PLAIN_TEXT]

    def serve(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=answers[len(bodies) - 1])

    with respx.mock(assert_all_mocked=True) as router:
        router.post(ANTHROPIC_URL).mock(side_effect=serve)
        rt = await runtime_for(_defs("claude", "anthropic"))
        thread = await rt.create_thread("chat")
        first = await thread.send("What is the weather in Oslo?")
        second = await thread.send("And tomorrow?")
    return bodies, thread, (first.output, second.output)


async def test_anthropic_web_search_is_sent_natively_and_never_run_locally(runtime_for: Any) -> None:
    bodies, thread, outputs = await _search_conversation(runtime_for)
    assert outputs == ("It is sunny in Oslo today.", "Rain is likely tomorrow.")
    assert RAN == []  # the provider ran the search; nothing ran here
    # the native tool goes out beside the local tool's function schema
    tools = bodies[0]["tools"]
    assert {"type": "web_search_20250305", "name": "web_search", "max_uses": 5} in tools
    assert [t["name"] for t in tools if t.get("type") != "web_search_20250305"] == ["lookup"]
    assert [t for t in tools if t.get("name") == "web_search"] == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    ]

    # stored: the provider's blocks verbatim on the assistant message, and no tool result
    stored = (await thread.get_messages()).messages
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    answer = stored[1]
    assert answer.content == "It is sunny in Oslo today."
    assert answer.provider_blocks == [
        {"type": "server_tool_use", "id": SEARCH_ID, "name": "web_search", "input": {"query": "weather Oslo today"}},
        {"type": "web_search_tool_result", "tool_use_id": SEARCH_ID, "content": SEARCH_RESULTS},
    ]
    assert all(c.provider_executed for c in answer.tool_calls or [])
    assert thread.record.usage.input_tokens == 2679 + 3100
    # the follow-up request is well formed: no client tool_use / tool_result invented for the search
    assert not [b for m in bodies[1]["messages"] for b in _blocks(m) if b["type"] in ("tool_use", "tool_result")]
    assert bodies[1]["messages"][-1]["role"] == "user" and "And tomorrow?" in json.dumps(bodies[1]["messages"][-1])


async def test_anthropic_web_search_blocks_are_replayed_on_the_next_request(runtime_for: Any) -> None:
    bodies, _, _ = await _search_conversation(runtime_for)
    [assistant] = [m for m in bodies[1]["messages"] if m["role"] == "assistant"]
    content = assistant["content"]
    assert isinstance(content, list), content
    kinds = [block["type"] for block in content]
    assert sorted(kinds) == ["server_tool_use", "text", "web_search_tool_result"], content
    use = kinds.index("server_tool_use")
    assert content[use] == {
        "type": "server_tool_use",
        "id": SEARCH_ID,
        "name": "web_search",
        "input": {"query": "weather Oslo today"},
    }
    # Anthropic wants each server tool's result right after its use
    assert content[use + 1] == {"type": "web_search_tool_result", "tool_use_id": SEARCH_ID, "content": SEARCH_RESULTS}
    assert content[kinds.index("text")]["text"] == "It is sunny in Oslo today."


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []


async def test_openai_web_search_is_sent_as_web_search_options(runtime_for: Any) -> None:
    model = ScriptedModel([ScriptedResponse(text="Sunny, per the web.")], wire="openai")
    with respx.mock(assert_all_mocked=True) as router:
        model.mount(router, "https://api.openai.com/v1")
        rt = await runtime_for(_defs("gpt", "openai"))
        thread = await rt.create_thread("chat")
        result = await thread.send("Weather in Oslo?")

    assert result.output == "Sunny, per the web."
    [body] = model.requests
    assert body["web_search_options"] == {}
    assert [t["function"]["name"] for t in body["tools"]] == ["lookup"]  # not a function tool
    assert RAN == []


@pytest.mark.parametrize(
    ("model", "provider", "served_by"), [("gpt", "anthropic", "openai"), ("claude", "openai", "anthropic")]
)
async def test_provider_tool_on_another_providers_model_is_refused_at_open(
    runtime_for: Any, model: str, provider: str, served_by: str
) -> None:
    with pytest.raises(DefinitionError) as caught:
        await runtime_for(_defs(model, provider))
    message = str(caught.value)
    assert "prompt 'pa'" in message and "'web_search'" in message
    assert f"provider {provider!r}" in message and f"served by {served_by!r}" in message


# ---------------------------------------------------------------------------
# tool attachments: stored, then sent as image parts or as a note
# ---------------------------------------------------------------------------


def _image_config(supports_images: bool) -> dict[str, Any]:
    return {
        "providers": {"scripted": {"type": "scripted"}},
        "models": {
            "demo": {
                "provider": "scripted",
                "model": "demo",
                "retry": {"attempts": 1},
                "supports_images": supports_images,
            }
        },
        "default_model": "demo",
    }


def _tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def _attachment_defs(attachment: dict[str, Any]):
    async def draw(state: Any, args: Q) -> ToolResult:
        return ToolResult(status="success", result="drew it", attachments=[ToolAttachment(**attachment)])

    prompts = {"pa": define_prompt(prompt="You are side a.", tool_description="side a", tools=("draw",))}
    tools = {"draw": define_tool(description="Draw a picture", args=Q, execute=draw)}
    return definitions(tools=tools, prompts=prompts, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))})


def _file_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM files").fetchone()[0]


GOOD_PNG = {"name": "dot.png", "mime_type": "image/png", "data": PNG_B64, "width": 1, "height": 1}


@pytest.mark.parametrize("supports_images", [True, False], ids=["image_model", "text_model"])
async def test_tool_attachment_is_stored_and_shown_to_the_model(
    make_runtime: Any, tmp_path: Path, supports_images: bool
) -> None:
    script = [R(tool_calls=[C("draw", {})]), R(text="Here it is.")]
    rt, model = await make_runtime(
        _attachment_defs(GOOD_PNG), script, config=_image_config(supports_images), db=str(tmp_path / "att.db")
    )
    thread = await rt.create_thread("chat")
    await thread.send("draw a dot")

    [tool_message] = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    [ref] = tool_message.attachments
    assert (ref.name, ref.mime_type, ref.size, ref.width, ref.height) == ("dot.png", "image/png", len(PNG), 1, 1)
    stored_ref, data = await rt.storage.get_file(thread.id, ref.id)
    assert data == PNG and stored_ref.id == ref.id
    assert _file_rows(tmp_path / "att.db") == 1

    view = model.requests[1]["messages"]
    call_id = view[2]["tool_calls"][0]["id"]
    if supports_images:
        assert view[3] == {"role": "tool", "tool_call_id": call_id, "content": "drew it"}
        assert view[4] == {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by the tools above:"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            ],
        }
        assert len(view) == 5
    else:
        assert view[3:] == [
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"drew it\n[attached file: dot.png (image/png, {len(PNG)} bytes)]",
            }
        ]
        assert "base64" not in json.dumps(model.requests[1])


@pytest.mark.parametrize(
    ("attachment", "problem"),
    [
        ({**GOOD_PNG, "data": "not base64!!"}, "data is not valid base64"),
        ({**GOOD_PNG, "name": "../x.png"}, "the name must be a plain file name without a path"),
        ({**GOOD_PNG, "name": "sub\\x.png"}, "the name must be a plain file name without a path"),
        (GOOD_PNG, f"{len(PNG)} bytes is over the limit of 32 bytes"),
    ],
    ids=["bad_base64", "path_in_name", "backslash_in_name", "too_big"],
)
async def test_bad_attachment_is_an_error_result_and_nothing_is_stored(
    make_runtime: Any, tmp_path: Path, attachment: dict[str, Any], problem: str
) -> None:
    script = [R(tool_calls=[C("draw", {})]), R(text="sorry")]
    rt, model = await make_runtime(
        _attachment_defs(attachment),
        script,
        config=_image_config(True),
        settings=RuntimeSettings(max_attachment_bytes=32),
        db=str(tmp_path / "bad.db"),
    )
    thread = await rt.create_thread("chat")
    await thread.send("draw")
    [answer] = _tool_messages(model.requests[1])
    assert answer["content"] == f"Tool 'draw' returned a bad attachment {attachment['name']!r}: {problem}"
    [tool_message] = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    assert tool_message.tool_status == "error" and tool_message.attachments == []
    assert _file_rows(tmp_path / "bad.db") == 0
    assert len(model.requests[1]["messages"]) == 4  # no image part follows
