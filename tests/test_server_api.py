"""The HTTP API against a runtime on a scripted model (httpx + ASGITransport)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field
from support import definitions

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.server.app import create_app
from orchestrator.server.auth import parse_tokens
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall
TOKENS = {"token-alice": "alice", "token-bob": "bob"}
ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}


class LookupArgs(BaseModel):
    order_id: str = Field(description="Order ID")


async def _lookup(state: Any, args: LookupArgs) -> ToolResult:
    state.emit("order_looked_up", {"order_id": args.order_id})
    return ToolResult(status="success", result=f"Order {args.order_id}: shipped")


class EndArgs(BaseModel):
    reason: str = ""


async def _end(state: Any, args: EndArgs) -> ToolResult:
    return ToolResult(status="success", result="bye")


def server_defs() -> Any:
    return definitions(
        tools={
            "lookup_order": define_tool(
                description="Look up an order", args=LookupArgs, execute=_lookup, progress_argument="order_id"
            ),
            "end_chat": define_tool(description="End the chat", args=EndArgs, execute=_end),
        },
        prompts={
            "agent_p": define_prompt(prompt="You are support.", tool_description="support", tools=("lookup_order",)),
            "customer_p": define_prompt(prompt="You are a customer.", tool_description="customer", tools=("end_chat",)),
        },
        agents={
            "demo": define_agent(
                type="dual_ai",
                side_a=Side("agent_p", max_steps=4),
                side_b=Side("customer_p", end_conversation_tool="end_chat"),
                max_session_turns=6,
            ),
            "chat": define_agent(type="ai_human", side_a=Side("agent_p")),
        },
    )


CONVERSATION = [
    R(text="Hello, how can I help?"),
    R(text="Where is order 42?"),
    R(tool_calls=[C("lookup_order", {"order_id": "42"})]),
    R(text="Order 42 has shipped."),
    R(tool_calls=[C("end_chat", {"reason": "done"})], text="Thanks!"),
]


@pytest.fixture
async def api(make_runtime: Any) -> AsyncIterator[Any]:
    """`client, app, model = await api(script)`: an API client on a scripted runtime."""
    clients: list[httpx.AsyncClient] = []

    async def factory(script: Any = CONVERSATION, **app_options: Any) -> tuple[httpx.AsyncClient, Any, Any]:
        runtime, model = await make_runtime(server_defs(), script)
        app = create_app(runtime, tokens=app_options.pop("tokens", TOKENS), **app_options)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        clients.append(client)
        return client, app, model

    yield factory
    for client in clients:
        await client.aclose()


async def _thread(client: httpx.AsyncClient, agent: str = "demo", headers: dict[str, str] = ALICE) -> str:
    res = await client.post("/threads", json={"agent": agent}, headers=headers)
    assert res.status_code == 201, res.text
    return res.json()["id"]


def _error(res: httpx.Response, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    assert res.status_code == status, res.text
    error = res.json()["error"]
    assert error["code"] == code, error
    if field is not None:
        assert error["field"] == field, error
        assert field.split(".")[-1] in error["message"], error
    return error


# -- threads and ownership -----------------------------------------------------


async def test_create_and_get_thread_owned_by_token_user(api: Any) -> None:
    client, _, _ = await api()
    res = await client.post("/threads", json={"agent": "demo", "arguments": {}}, headers=ALICE)
    assert res.status_code == 201
    body = res.json()
    assert body["user_id"] == "alice" and body["agent"] == "demo" and body["agent_type"] == "dual_ai"
    assert body["status"] == "idle" and body["running"] is False
    got = await client.get(f"/threads/{body['id']}", headers=ALICE)
    assert got.status_code == 200 and got.json()["id"] == body["id"]
    listed = (await client.get("/threads", headers=ALICE)).json()["threads"]
    assert [t["id"] for t in listed] == [body["id"]]
    assert (await client.get("/threads", headers=BOB)).json()["threads"] == []


async def test_the_thread_list_is_yours_newest_first_and_pages(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the page lists: your threads, newest first (storage lists them oldest first), with agent and status;
    paged from the newest, also across the route's read batches."""
    from orchestrator.server import routes

    monkeypatch.setattr(routes, "_BATCH", 2)  # pages cross the batches the route reads storage in
    client, _, _ = await api()
    alices = [await _thread(client, agent) for agent in ("demo", "chat", "demo", "chat", "demo")]
    bobs = await _thread(client, "chat", headers=BOB)
    listed = (await client.get("/threads", headers=ALICE)).json()["threads"]
    assert [t["id"] for t in listed] == alices[::-1]
    assert [(t["agent"], t["status"]) for t in listed[:2]] == [("demo", "idle"), ("chat", "idle")]
    page = (await client.get("/threads?limit=2&offset=1", headers=ALICE)).json()["threads"]
    assert [t["id"] for t in page] == alices[::-1][1:3]
    assert [t["id"] for t in (await client.get("/threads", headers=BOB)).json()["threads"]] == [bobs]


async def test_another_users_token_gets_404_everywhere(api: Any) -> None:
    client, _, _ = await api()
    tid = await _thread(client)
    calls = [
        client.get(f"/threads/{tid}", headers=BOB),
        client.get(f"/threads/{tid}/messages", headers=BOB),
        client.post(f"/threads/{tid}/run", headers=BOB),
        client.post(f"/threads/{tid}/stop", headers=BOB),
        client.post(f"/threads/{tid}/force-turn", json={"side": "b"}, headers=BOB),
        client.get(f"/threads/{tid}/values/k", headers=BOB),
        client.put(f"/threads/{tid}/values/k", json={"value": 1}, headers=BOB),
        client.get(f"/threads/{tid}/env", headers=BOB),
        client.put(f"/threads/{tid}/env/X", json={"value": "v"}, headers=BOB),
    ]
    for res in await asyncio.gather(*calls):
        _error(res, 404, "thread_not_found", "path.thread_id")
    missing = await client.get("/threads/thr_nope", headers=ALICE)
    assert missing.json() == {"error": {**missing.json()["error"], "code": "thread_not_found"}}
    assert (
        missing.json()["error"]["message"]
        == (await client.get("/threads/thr_nope", headers=BOB)).json()["error"]["message"]
    )


async def test_missing_or_wrong_token_is_401(api: Any) -> None:
    client, _, _ = await api()
    res = await client.get("/agents")
    _error(res, 401, "unauthorized")
    assert res.headers["www-authenticate"] == "Bearer"
    _error(await client.get("/agents", headers={"Authorization": "Bearer nope"}), 401, "unauthorized")
    _error(await client.get("/agents", headers={"Authorization": "Basic dG9rZW4tYWxpY2U="}), 401, "unauthorized")


async def test_open_server_without_tokens(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRATOR_TOKENS", raising=False)
    client, _, _ = await api(tokens={})
    res = await client.post("/threads", json={"agent": "demo", "user_id": "carol"})
    assert res.status_code == 201 and res.json()["user_id"] == "carol"
    assert (await client.get(f"/threads/{res.json()['id']}")).status_code == 200


async def test_tokens_from_env(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_TOKENS", "envtok:dave, other:erin")
    client, _, _ = await api(tokens={})
    res = await client.post("/threads", json={"agent": "demo"}, headers={"Authorization": "Bearer envtok"})
    assert res.json()["user_id"] == "dave"
    assert parse_tokens("a:b,c:d") == {"a": "b", "c": "d"}
    with pytest.raises(ValueError, match="entry 2 must be TOKEN:USER") as info:
        parse_tokens("a:b,secretonly")
    assert "secretonly" not in str(info.value)


async def test_create_thread_bad_inputs(api: Any) -> None:
    client, _, _ = await api()
    _error(await client.post("/threads", json={"agent": "nope"}, headers=ALICE), 422, "unknown_agent", "body.agent")
    _error(await client.post("/threads", json={}, headers=ALICE), 422, "invalid_request", "body.agent")
    _error(await client.post("/threads", json={"agent": 5}, headers=ALICE), 422, "invalid_request", "body.agent")
    _error(
        await client.post("/threads", json={"agent": "demo", "arguments": [1]}, headers=ALICE),
        422,
        "invalid_request",
        "body.arguments",
    )
    _error(
        await client.post("/threads", json={"agent": "demo", "extra": 1}, headers=ALICE),
        422,
        "invalid_request",
        "body.extra",
    )
    _error(
        await client.post("/threads", json={"agent": "demo", "user_id": "bob"}, headers=ALICE),
        403,
        "forbidden_user",
        "body.user_id",
    )
    _error(await client.post("/threads", json=[1, 2], headers=ALICE), 422, "invalid_request")
    bad_json = await client.post(
        "/threads", content=b'{"agent": ', headers={**ALICE, "Content-Type": "application/json"}
    )
    _error(bad_json, 400, "invalid_json", "body")
    deep = await client.post(
        "/threads", content=b"[" * 50_000 + b"]" * 50_000, headers={**ALICE, "Content-Type": "application/json"}
    )
    assert 400 <= deep.status_code < 500, deep.text


async def test_body_size_limit(api: Any) -> None:
    client, _, _ = await api(max_body_bytes=2_000)
    tid = await _thread(client)
    res = await client.put(f"/threads/{tid}/values/big", json={"value": "x" * 5_000}, headers=ALICE)
    _error(res, 413, "body_too_large", "body")

    async def chunks() -> AsyncIterator[bytes]:  # no content-length: counted as it streams
        for _ in range(10):
            yield b" " * 500

    streamed = await client.put(
        f"/threads/{tid}/values/big", content=chunks(), headers={**ALICE, "Content-Type": "application/json"}
    )
    _error(streamed, 413, "body_too_large")
    ok = await client.put(f"/threads/{tid}/values/small", json={"value": "x" * 100}, headers=ALICE)
    assert ok.status_code == 200


# -- executions ----------------------------------------------------------------


async def test_run_waits_for_result_and_lists_messages(api: Any) -> None:
    client, _, _ = await api()
    tid = await _thread(client)
    res = await client.post(f"/threads/{tid}/run", params={"wait": "true"}, headers=ALICE)
    assert res.status_code == 200, res.text
    result = res.json()
    assert (result["reason"], result["stopped_by"], result["step_count"]) == ("end_conversation", "b", 5)
    assert (result["side_a_step_count"], result["side_b_step_count"]) == (3, 2)

    page = (await client.get(f"/threads/{tid}/messages", headers=ALICE)).json()
    assert page["total"] == 7 and page["has_more"] is False
    assert [m["role"] for m in page["messages"]] == [
        "assistant",
        "assistant",
        "assistant",
        "tool",
        "assistant",
        "assistant",
        "tool",
    ]
    first2 = (await client.get(f"/threads/{tid}/messages", params={"limit": 2, "offset": 1}, headers=ALICE)).json()
    assert [m["seq"] for m in first2["messages"]] == [2, 3] and first2["has_more"] is True and first2["total"] == 7
    last = (await client.get(f"/threads/{tid}/messages", params={"limit": 1, "order": "desc"}, headers=ALICE)).json()
    assert last["messages"][0]["role"] == "tool" and last["messages"][0]["name"] == "end_chat"
    thread = (await client.get(f"/threads/{tid}", headers=ALICE)).json()
    assert thread["status"] == "completed" and thread["execution"]["step_count"] == 5 and thread["running"] is False


async def test_messages_query_validation(api: Any) -> None:
    client, _, _ = await api()
    tid = await _thread(client)
    for params, field in [
        ({"limit": 0}, "query.limit"),
        ({"limit": "x"}, "query.limit"),
        ({"offset": -1}, "query.offset"),
        ({"order": "up"}, "query.order"),
        ({"include_silent": "maybe"}, "query.include_silent"),
        ({"max_depth": -1}, "query.max_depth"),
    ]:
        _error(
            await client.get(f"/threads/{tid}/messages", params=params, headers=ALICE), 422, "invalid_request", field
        )


async def test_include_silent_and_max_depth(api: Any) -> None:
    client, app, _ = await api()
    tid = await _thread(client)
    thread = await app.state.server.runtime.get_thread(tid)
    await thread.state.inject_message("system", "hidden note", silent=True)
    await thread.state.inject_message("user", "shown note")
    plain = (await client.get(f"/threads/{tid}/messages", headers=ALICE)).json()
    assert [m["content"] for m in plain["messages"]] == ["shown note"]
    silent = (
        await client.get(f"/threads/{tid}/messages", params={"include_silent": "true", "max_depth": 0}, headers=ALICE)
    ).json()
    assert [m["content"] for m in silent["messages"]] == ["hidden note", "shown note"] and silent["total"] == 2


async def test_run_in_background_answers_202(api: Any) -> None:
    client, app, _ = await api()
    tid = await _thread(client)
    res = await client.post(f"/threads/{tid}/run", headers=ALICE)
    assert res.status_code == 202
    assert res.json() == {"thread_id": tid, "status": "started", "events": f"/threads/{tid}/events"}
    result = await app.state.server.runs.wait(tid)
    assert result is not None and result.reason == "end_conversation"
    assert (await client.get(f"/threads/{tid}", headers=ALICE)).json()["status"] == "completed"


async def test_busy_thread_409_then_stop(api: Any) -> None:
    client, app, model = await api([R(text="Hello there, I am thinking", hang_after=2)])
    tid = await _thread(client)
    assert (await client.post(f"/threads/{tid}/run", headers=ALICE)).status_code == 202
    runs = app.state.server.runs
    while model.streams_opened == 0:  # the model stream is open: the execution is mid-step
        await asyncio.sleep(0.01)
    _error(await client.post(f"/threads/{tid}/run", headers=ALICE), 409, "thread_busy", "path.thread_id")
    assert (await client.get(f"/threads/{tid}", headers=ALICE)).json()["running"] is True
    stop = await client.post(f"/threads/{tid}/stop", headers=ALICE)
    assert stop.status_code == 200 and stop.json()["running"] is True
    result = await asyncio.wait_for(runs.wait(tid), 10)
    assert result.stopped_by == "caller" and model.streams_closed == 1  # a stop from outside, not side a
    again = await client.post(f"/threads/{tid}/stop", headers=ALICE)
    assert again.json() == {"thread_id": tid, "running": False, "detail": "not running"}
    assert (await client.get(f"/threads/{tid}/messages", headers=ALICE)).json()["total"] == 0  # nothing half-written


async def test_send_message_to_ai_human_thread(api: Any) -> None:
    client, app, model = await api([R(text="Hi! Order 7 is on its way.")])
    tid = await _thread(client, "chat")
    res = await client.post(f"/threads/{tid}/messages", json={"text": "Where is order 7?"}, headers=ALICE)
    assert res.status_code == 202
    result = await app.state.server.runs.wait(tid)
    assert result.output == "Hi! Order 7 is on its way." and result.side_b_step_count == 0
    assert model.requests[0]["messages"][-1] == {"role": "user", "content": "Where is order 7?"}
    page = (await client.get(f"/threads/{tid}/messages", headers=ALICE)).json()
    assert [(m["side"], m["content"]) for m in page["messages"]] == [
        ("b", "Where is order 7?"),
        ("a", "Hi! Order 7 is on its way."),
    ]


async def test_wrong_agent_type_and_bad_message(api: Any) -> None:
    client, _, _ = await api()
    dual, chat = await _thread(client, "demo"), await _thread(client, "chat")
    _error(await client.post(f"/threads/{dual}/messages", json={"text": "hi"}, headers=ALICE), 409, "wrong_agent_type")
    _error(await client.post(f"/threads/{chat}/run", headers=ALICE), 409, "wrong_agent_type")
    _error(
        await client.post(f"/threads/{chat}/messages", json={"text": "   "}, headers=ALICE),
        422,
        "invalid_request",
        "body.text",
    )
    _error(
        await client.post(f"/threads/{chat}/messages", json={"text": 3}, headers=ALICE),
        422,
        "invalid_request",
        "body.text",
    )
    _error(await client.post(f"/threads/{chat}/messages", json={}, headers=ALICE), 422, "invalid_request", "body.text")
    _error(
        await client.post(f"/threads/{chat}/messages", params={"wait": "sure"}, json={"text": "x"}, headers=ALICE),
        422,
        "invalid_request",
        "query.wait",
    )


async def test_force_turn_before_run_gives_side_b_the_first_turn(api: Any) -> None:
    client, _, model = await api([R(tool_calls=[C("end_chat", {"reason": "done"})])])
    tid = await _thread(client)
    res = await client.post(f"/threads/{tid}/force-turn", json={"side": "b"}, headers=ALICE)
    assert res.status_code == 200 and res.json()["running"] is False
    result = (await client.post(f"/threads/{tid}/run?wait=true", headers=ALICE)).json()
    assert result["stopped_by"] == "b" and result["side_a_step_count"] == 0
    assert model.requests[0]["messages"][0]["content"] == "You are a customer."
    _error(
        await client.post(f"/threads/{tid}/force-turn", json={"side": "c"}, headers=ALICE),
        422,
        "invalid_request",
        "body.side",
    )


# -- values and env ------------------------------------------------------------


async def test_values_roundtrip(api: Any) -> None:
    client, app, _ = await api()
    tid = await _thread(client)
    assert (await client.get(f"/threads/{tid}/values/cart", headers=ALICE)).json() == {"key": "cart", "value": None}
    value = {"items": [1, 2], "note": "é"}
    put = await client.put(f"/threads/{tid}/values/cart", json={"value": value}, headers=ALICE)
    assert put.status_code == 200 and put.json() == {"key": "cart", "value": value}
    assert (await client.get(f"/threads/{tid}/values/cart", headers=ALICE)).json()["value"] == value
    thread = await app.state.server.runtime.get_thread(tid)
    assert await thread.state.get_value("cart") == value  # the same store tools read
    _error(
        await client.put(f"/threads/{tid}/values/cart", json={}, headers=ALICE), 422, "invalid_request", "body.value"
    )
    nan = await client.put(
        f"/threads/{tid}/values/cart", content=b'{"value": NaN}', headers={**ALICE, "Content-Type": "application/json"}
    )
    _error(nan, 422, "invalid_value", "body.value")


async def test_env_text_and_secret_never_returned(api: Any) -> None:
    client, app, _ = await api()
    tid = await _thread(client)
    secret = "s3cr3t-value-do-not-leak"
    text = await client.put(f"/threads/{tid}/env/REGION", json={"value": "eu-west", "type": "text"}, headers=ALICE)
    assert text.json() == {"name": "REGION", "type": "text", "value": "eu-west"}
    sec = await client.put(f"/threads/{tid}/env/API_TOKEN", json={"value": secret}, headers=ALICE)
    assert sec.status_code == 200 and sec.json() == {"name": "API_TOKEN", "type": "secret", "value": None}
    listed = await client.get(f"/threads/{tid}/env", headers=ALICE)
    assert sorted((e["name"], e["type"], e["value"]) for e in listed.json()["env"]) == [
        ("API_TOKEN", "secret", None),
        ("REGION", "text", "eu-west"),
    ]
    assert secret not in listed.text and secret not in sec.text
    thread = await app.state.server.runtime.get_thread(tid)
    assert await thread.state.env("API_TOKEN") == secret and await thread.state.env_type("REGION") == "text"
    kept = await client.put(f"/threads/{tid}/env/REGION", json={"value": "us-east"}, headers=ALICE)
    assert kept.json()["type"] == "text"  # no type: keeps the existing one
    _error(
        await client.put(f"/threads/{tid}/env/1BAD", json={"value": "x"}, headers=ALICE),
        422,
        "invalid_request",
        "path.name",
    )
    _error(
        await client.put(f"/threads/{tid}/env/OK", json={"value": "x", "type": "public"}, headers=ALICE),
        422,
        "invalid_request",
        "body.type",
    )
    _error(
        await client.put(f"/threads/{tid}/env/OK", json={"value": 5}, headers=ALICE),
        422,
        "invalid_request",
        "body.value",
    )


# -- catalog, docs, page ---------------------------------------------------------


async def test_agents_and_tools(api: Any) -> None:
    client, _, _ = await api()
    agents = {a["name"]: a for a in (await client.get("/agents", headers=ALICE)).json()["agents"]}
    assert agents["demo"]["type"] == "dual_ai" and agents["demo"]["side_b"]["end_conversation_tool"] == "end_chat"
    assert agents["chat"]["type"] == "ai_human" and agents["chat"]["side_b"] is None
    tools = {t["name"]: t for t in (await client.get("/tools", headers=ALICE)).json()["tools"]}
    assert tools["lookup_order"]["progress_argument"] == "order_id"
    assert tools["lookup_order"]["parameters"]["required"] == ["order_id"]
    assert tools["agent_p"]["kind"] == "prompt"


async def test_openapi_page_and_unknown_routes(api: Any) -> None:
    client, _, _ = await api()
    doc = (await client.get("/openapi.json")).json()
    assert {"/threads", "/threads/{thread_id}/run", "/threads/{thread_id}/messages", "/agents", "/tools"} <= set(
        doc["paths"]
    )
    assert "ErrorBody" in doc["components"]["schemas"]
    page = await client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"] and "app.js" in page.text
    assert (await client.get("/static/app.js")).status_code == 200
    _error(await client.get("/nowhere", headers=ALICE), 404, "not_found")
    _error(await client.delete("/agents", headers=ALICE), 405, "method_not_allowed")


async def test_errors_are_json_for_every_bad_request(api: Any) -> None:
    client, _, _ = await api()
    tid = await _thread(client)
    bodies = [b"", b"null", b"[]", b"1", b'"x"', b"{", b"\xff\xfe", b'{"value": 1e999999}']
    for path in ["/threads", f"/threads/{tid}/force-turn", f"/threads/{tid}/values/k"]:
        for body in bodies:
            method = "PUT" if "values" in path else "POST"
            res = await client.request(
                method, path, content=body, headers={**ALICE, "Content-Type": "application/json"}
            )
            assert 400 <= res.status_code < 500 or res.status_code == 200, (path, body, res.text)
            if res.status_code >= 400:
                assert set(json.loads(res.text)["error"]) == {"code", "message", "field"}
