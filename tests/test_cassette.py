"""Recording provider traffic at the HTTP level and replaying it through LiteLLM."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from providers.cassette import Cassette, CassetteMismatch, load_cassette, record, replay
from providers.client import ModelClient
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse
from providers.stream import ProviderError, TextDelta, ToolCallDelta

KEYS = {
    "OPENAI_API_KEY": "sk-test-openai-SECRET-000111222",
    "ANTHROPIC_API_KEY": "sk-ant-test-SECRET-333444555",
    "GEMINI_API_KEY": "AIzaTestSECRET666777888999000aaa",
}
USER_SECRET = "hunter2-password-xyz"


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(params=["auto", "litellm"])
def client(request) -> ModelClient:
    """Both stream paths: the runtime's OpenAI-wire reader and litellm.acompletion."""

    async def no_sleep(_: float) -> None:
        return None

    return ModelClient(
        config_from_dict(
            {
                "providers": {p: {"api_key": f"${{{p.upper()}_API_KEY}}"} for p in ("openai", "anthropic", "gemini")}
                | {"demo": {"type": "scripted", "stream": request.param}},
                "models": {
                    "demo": {"provider": "demo", "model": "demo", "retry": {"attempts": 1}},
                    "gpt": {"provider": "openai", "model": "gpt-4o-mini", "retry": {"attempts": 1}},
                    "claude": {
                        "provider": "anthropic",
                        "model": "claude-sonnet-4-5",
                        "params": {"max_tokens": 256},
                        "retry": {"attempts": 1},
                    },
                    "gem": {"provider": "gemini", "model": "gemini-2.5-flash", "retry": {"attempts": 1}},
                },
            }
        ),
        sleep=no_sleep,
    )


def conversation(turn: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Where is order A-1?"}]
    if turn == 2:
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_01_0",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"order_id": "A-1"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_01_0", "content": "shipped"},
        ]
    return messages


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
]


async def run_conversation(client: ModelClient) -> list[list[Any]]:
    turns = []
    for turn in (1, 2):
        turns.append([i async for i in client.stream("demo", conversation(turn), tools=TOOLS)])
    return turns


SCRIPT = [
    ScriptedResponse(text="Let me check.", tool_calls=[ScriptedCall("lookup", {"order_id": "A-1"})]),
    ScriptedResponse(text="Order A-1 has shipped.", usage=(40, 8)),
]


async def test_record_then_replay_gives_the_same_stream(tmp_path, client):
    path = tmp_path / "conversation.json"
    model = ScriptedModel(SCRIPT)
    with model.serving():
        async with record(path, metadata={"note": "two turns"}):
            recorded = await run_conversation(client)
    assert len(model.requests) == 2

    cassette = load_cassette(path)
    assert [i.request.url for i in cassette.interactions] == ["http://scripted.invalid/v1/chat/completions"] * 2
    assert cassette.interactions[0].response.status == 200 and cassette.interactions[0].response.complete
    assert cassette.interactions[1].request.body["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_01_0",
        "content": "shipped",
    }
    assert cassette.interactions[0].response.body.count("data: [DONE]") == 1  # readable SSE text, held once
    assert cassette.metadata == {"note": "two turns"}

    with replay(path) as replayer:  # no scripted model now: bytes come from the file
        replayed = await run_conversation(client)
    assert replayed == recorded
    assert replayer.remaining == 0
    text = "".join(i.text for i in replayed[1] if isinstance(i, TextDelta))
    assert text == "Order A-1 has shipped."
    assert [c.name for c in replayed[0] if isinstance(c, ToolCallDelta) and c.name] == ["lookup"]


async def test_replay_mismatch_shows_first_difference(tmp_path, client):
    path = tmp_path / "c.json"
    with ScriptedModel(SCRIPT).serving():
        with record(path):
            await run_conversation(client)
    with pytest.raises(CassetteMismatch) as info:
        with replay(path):
            [i async for i in client.stream("demo", [{"role": "user", "content": "Where is order B-2?"}], tools=TOOLS)]
    message = str(info.value)
    assert "interaction #1" in message
    assert "$.messages[0].content" in message
    assert "expected 'Where is order A-1?', got 'Where is order B-2?'" in message
    assert isinstance(info.value.__cause__, ProviderError)  # what the client saw, chained


async def test_replay_beyond_the_cassette_is_a_mismatch(tmp_path, client):
    path = tmp_path / "c.json"
    with ScriptedModel(SCRIPT[:1]).serving(), record(path):
        [i async for i in client.stream("demo", conversation(1), tools=TOOLS)]
    with pytest.raises(CassetteMismatch, match="cassette exhausted.*POST http://scripted.invalid/v1/chat/completions"):
        with replay(path):
            await run_conversation(client)


async def test_recording_holds_no_key_auth_header_or_secret(tmp_path, client):
    path = tmp_path / "all.json"
    messages = [{"role": "user", "content": f"my password is {USER_SECRET}, keep it"}]
    # one chunk: a secret split across SSE deltas is not recognised (see cassette docs)
    models = [
        ScriptedModel([ScriptedResponse(text=f"noted {USER_SECRET}", chunk_size=100)], wire=w)
        for w in ("openai", "anthropic", "gemini")
    ]
    with models[0].serving("https://api.openai.com/v1"), models[1].serving(), models[2].serving():
        async with record(path, secrets=[USER_SECRET]):
            for alias in ("gpt", "claude", "gem"):
                [i async for i in client.stream(alias, messages)]
    raw = path.read_text()
    for key in KEYS.values():
        assert key not in raw
    assert USER_SECRET not in raw and "<redacted>" in raw
    lowered = raw.lower()
    for header in ("authorization", "x-api-key", "x-goog-api-key", "bearer"):
        assert header not in lowered
    assert "key=" not in raw
    hosts = [i.request.url.split("/")[2] for i in load_cassette(path).interactions]
    assert hosts == ["api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com"]

    # a redacted value still matches on replay, whatever the secret is now
    with replay(path) as replayer:
        for alias in ("gpt", "claude", "gem"):
            items = [i async for i in client.stream(alias, messages)]
            assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "noted <redacted>"
    assert replayer.remaining == 0


async def test_pytest_fixture_and_other_hosts_pass_through(tmp_path, client, replay_cassette):
    path = tmp_path / "c.json"
    with ScriptedModel(SCRIPT).serving(), record(path):
        expected = await run_conversation(client)
    with respx.mock(assert_all_called=False) as tools_api:  # started before the replay: it gets first try
        tools_api.get("http://orders.invalid/api/A-1").mock(
            return_value=httpx.Response(200, json={"status": "shipped"})
        )
        replayer = replay_cassette(path)
        assert await run_conversation(client) == expected
        async with httpx.AsyncClient() as http:
            assert (await http.get("http://orders.invalid/api/A-1")).json() == {"status": "shipped"}
    assert replayer.remaining == 0


def test_cassette_save_and_load_round_trip(tmp_path):
    cassette = Cassette(metadata={"expected": {"messages": [{"role": "assistant", "content": "hi"}]}})
    cassette.save(tmp_path / "x.json")
    loaded = load_cassette(tmp_path / "x.json")
    assert loaded == cassette
    assert json.loads((tmp_path / "x.json").read_text())["version"] == 1
    with pytest.raises(ValueError, match="not a valid cassette"):
        (tmp_path / "bad.json").write_text("{]")
        load_cassette(tmp_path / "bad.json")
