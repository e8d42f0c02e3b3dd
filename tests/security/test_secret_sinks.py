"""Attack: secrets reach the sinks redaction did not cover (issue 43, item 4).

Traces: a tool's error went into the `execute_tool` span status as it was, and
with content capture on the content was redacted after `json.dumps`, so a
secret holding `"`, `\\`, a newline or (as a model escapes it) a non-ASCII
character no longer matched and was exported in clear. An exception escaping a
span was recorded by the SDK, message and stack unredacted.

MCP: `env: {SVC_TOKEN: ${SVC_TOKEN}}` or an HTTP server's `headers` hand a
credential to a server, yet it was no secret: a server that sent it back put it
in the stored tool result, the `tool_result` event and the next model request,
and one that wrote it to stderr put it in the debug log.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from support import Q, definitions, event_log, tool_messages
from test_mcp import SERVER, http_url  # noqa: F401  (http_url: the MCP test server over HTTP, a fixture)
from test_tracing import spans  # noqa: F401  (the in-memory exporter behind the global tracer provider)

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core import tracing
from orchestrator.core.logs import configure_logging, register_secrets
from orchestrator.core.messages import ToolCall
from orchestrator.core.secrets import Redactor, SecretScopes
from orchestrator.core.settings import RuntimeSettings
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall
PROCESS_TOKEN = "svc-token-7c1e0a94d2"
# Each is a secret a dump writes otherwise than as itself.
AWKWARD = {
    "quote": 'pass"word-4d1c9e',
    "backslash": "pass\\word-4d1c9e",
    "newline": "pass\nword-4d1c9e",
    "non_ascii": "pässwörd-4d1c9e",
}


def _forms(secret: str) -> set[str]:
    """The secret as itself and as JSON and repr write it inside a longer string."""
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret + "'\"")[1:-4],
    }


def _leaks(text: str, secret: str) -> list[str]:
    return [form for form in _forms(secret) if form in text]


def _span_text(span: Any) -> str:
    """Everything a span exports that is text: attributes, status, events and their attributes."""
    parts = [span.name, span.status.description or "", *map(str, span.attributes.values())]
    for event in span.events:
        parts += [event.name, *map(str, event.attributes.values())]
    return "\n".join(parts)


# -- traces ------------------------------------------------------------------------


def _tool_defs() -> Any:
    async def login(state: Any, args: Q) -> ToolResult:
        token = await state.env("SINK_TOKEN")
        return ToolResult.fail(f"login refused for token {token}")

    async def weather(state: Any, args: Q) -> ToolResult:
        return ToolResult.ok("sunny")

    tools = {
        "login": define_tool(description="Log in", args=Q, execute=login),
        "weather": define_tool(description="Weather", args=Q, execute=weather),
    }
    prompt = define_prompt(prompt="You help.", tool_description="t", tools=("login", "weather"))
    return definitions(
        tools=tools, prompts={"pa": prompt}, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))}
    )


async def test_a_tool_error_in_the_span_status_is_redacted_with_capture_off(
    make_runtime: Any, spans: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SINK_TOKEN", PROCESS_TOKEN)
    rt, _ = await make_runtime(_tool_defs(), [R(tool_calls=[C("login", {})]), R(text="refused")])
    await (await rt.create_thread("chat")).send("log in")

    [span] = [s for s in spans.get_finished_spans() if s.name == "execute_tool login"]
    assert span.status.description == "login refused for token ***"
    assert all(not _leaks(_span_text(s), PROCESS_TOKEN) for s in spans.get_finished_spans())


@pytest.mark.parametrize("secret", list(AWKWARD.values()), ids=list(AWKWARD))
async def test_captured_content_is_redacted_whatever_the_secret_holds(
    make_runtime: Any, spans: Any, secret: str
) -> None:
    arguments = json.dumps({"q": secret})  # as a model writes it: non-ASCII as \\u escapes
    script = [R(tool_calls=[C("weather", arguments)]), R(text=f"the token is {secret}")]
    rt, _ = await make_runtime(_tool_defs(), script, settings=RuntimeSettings(trace_content=True))
    thread = await rt.create_thread("chat")
    await thread.state.set_env("TOKEN", secret)
    await thread.send(f"my token is {secret}")

    chats = [s for s in spans.get_finished_spans() if s.name == "chat demo"]
    assert len(chats) == 2
    for chat in chats:
        assert not _leaks(_span_text(chat), secret)
    assert "my token is ***" in chats[0].attributes["gen_ai.input.messages"]
    assert "the token is ***" in chats[1].attributes["gen_ai.output.messages"]
    sent = json.loads(chats[0].attributes["gen_ai.output.messages"])["tool_calls"][0]["arguments"]
    assert json.loads(sent) == {"q": "***"}


async def test_an_exception_escaping_a_span_and_a_span_event_are_redacted(spans: Any) -> None:
    secret = AWKWARD["quote"]
    scopes = SecretScopes([secret])
    register_secrets(scopes)

    @tracing.tool_call
    async def call(tool_call: ToolCall) -> ToolResult:
        tracing.add_event("retry", reason=f"upstream said {json.dumps({'key': secret})}")
        raise RuntimeError(f"could not reach the service with {secret!r}")

    with pytest.raises(RuntimeError):
        await call(ToolCall(id="c1", name="lookup", arguments="{}"))

    [span] = [s for s in spans.get_finished_spans() if s.name == "execute_tool lookup"]
    text = _span_text(span)
    assert not _leaks(text, secret)
    [retry, exception] = span.events
    assert retry.attributes["reason"] == 'upstream said {"key": "***"}'
    assert exception.attributes["exception.message"] == "could not reach the service with '***'"
    assert "RuntimeError" in exception.attributes["exception.stacktrace"]
    assert span.status.description == "RuntimeError: could not reach the service with '***'"


def test_a_redactor_matches_each_escaped_form_and_short_ones_stay_whole_words() -> None:
    redactor = Redactor([*AWKWARD.values(), 'ab"c'])
    for secret in AWKWARD.values():
        dumped = {"json": json.dumps({"k": secret}), "ascii": json.dumps([secret], ensure_ascii=True)}
        dumped |= {"repr": repr({"k": secret}), "ascii_repr": ascii([secret]), "mixed": repr(f"it's {secret}")}
        for how, text in dumped.items():
            assert not _leaks(redactor.text(text), secret), how
    assert redactor.text(json.dumps('x ab"c y')) == '"x *** y"'  # a short secret, escaped: still a whole word
    assert redactor.text(json.dumps('xab"c')) == json.dumps('xab"c')
    assert redactor.json({"k": AWKWARD["newline"], AWKWARD["quote"]: 1}) == '{"k": "***", "***": 1}'


def test_a_text_with_a_lone_surrogate_is_redacted_around_it() -> None:
    """A tool's error may quote a string no UTF-8 can hold; the automata refused it, and the span that
    reported the error raised out of the tool call (CI found it when a process-wide secret was registered)."""
    long, short = Redactor(["supersecretvalue"]), Redactor(["tok1"])
    assert long.text("bad \udfff supersecretvalue\ud800") == "bad \udfff ***\ud800"
    assert short.text("\udfff tok1 tok12") == "\udfff *** tok12"
    assert long.text("\ud800") == "\ud800"


# -- logs -------------------------------------------------------------------------


@pytest.mark.parametrize("json_lines", [True, False], ids=["json", "console"])
def test_what_a_log_renderer_dumps_after_redaction_is_redacted(json_lines: bool) -> None:
    """An object's repr and an `exc_info` traceback were written by the renderer after redaction had run."""
    secret = AWKWARD["quote"]
    register_secrets(scopes := SecretScopes([secret]))
    buffer = io.StringIO()
    configure_logging("DEBUG", json=json_lines, stream=buffer)
    try:
        log = structlog.get_logger("t")
        log.warning("call failed", error=RuntimeError(f"refused {secret}"), args=(ToolCall(id="c", name=secret),))
        try:
            raise KeyError(secret)
        except KeyError:
            log.exception("lookup failed")
    finally:
        structlog.reset_defaults()
    text = buffer.getvalue()
    assert "call failed" in text and "lookup failed" in text and "KeyError" in text
    assert not _leaks(text, secret) and scopes.everywhere().active


def test_a_stdlib_traceback_is_redacted() -> None:
    secret = AWKWARD["backslash"]
    register_secrets(scopes := SecretScopes([secret]))  # held weakly: kept alive by this name
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    logger = logging.getLogger("sink-test")
    logger.addHandler(handler)
    try:
        try:
            raise ValueError(f"bad token {secret!r}")
        except ValueError:
            logger.error("the call failed", exc_info=True, stack_info=True)
    finally:
        logger.removeHandler(handler)
    text = buffer.getvalue()
    assert "the call failed" in text and "ValueError: bad token '***'" in text and "Stack (most recent" in text
    assert not _leaks(text, secret) and scopes.everywhere().active


# -- MCP credentials --------------------------------------------------------------


def _mcp_config(**server: Any) -> dict[str, Any]:
    spec = {"command": sys.executable, "args": [SERVER], **server}
    return {
        "providers": {"scripted": {"type": "scripted"}},
        "models": {"demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}},
        "default_model": "demo",
        "mcp_servers": {"svc": spec},
    }


def _mcp_defs() -> Any:
    prompt = define_prompt(prompt="You help.", tool_description="t", tools=("mcp:svc",))
    return definitions(prompts={"pa": prompt}, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))})


@pytest.fixture
def debug_log() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    configure_logging("DEBUG", json=True, stream=buffer)
    try:
        yield buffer
    finally:
        structlog.reset_defaults()


async def _sinks(rt: Any, thread: Any, model: Any) -> str:
    """What the thread stored and emitted, and the request the model was sent after the tool ran."""
    stored = [m.model_dump_json() for m in (await thread.get_messages()).messages]
    events = [e.model_dump_json() for e in await event_log(rt, thread) if e.type == "tool_result"]
    assert events, "no tool_result event"
    return "\n".join([*stored, *events, json.dumps(model.requests[1], ensure_ascii=False)])


async def test_a_stdio_servers_env_token_is_a_secret_everywhere(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch, debug_log: io.StringIO
) -> None:
    monkeypatch.setenv("SINK_SVC_TOKEN", PROCESS_TOKEN)
    calls = [C("show_env", {"name": "SVC_TOKEN"}), C("log_env", {"name": "SVC_TOKEN"})]
    config = _mcp_config(env={"SVC_TOKEN": "${SINK_SVC_TOKEN}", "PLAIN": "not-a-secret-value"})
    rt, model = await make_runtime(_mcp_defs(), [R(tool_calls=calls), R(text="ok")], config=config)
    thread = await rt.create_thread("chat")
    await thread.send("go")
    await _until(lambda: "env SVC_TOKEN is" in debug_log.getvalue())

    assert [m["content"] for m in tool_messages(model.requests[1])] == ["***", "logged"]  # it reached the server
    assert not _leaks(await _sinks(rt, thread, model), PROCESS_TOKEN)
    assert not _leaks(debug_log.getvalue(), PROCESS_TOKEN) and "env SVC_TOKEN is ***" in debug_log.getvalue()


async def test_an_http_servers_header_token_is_a_secret_everywhere(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch, http_url: str
) -> None:
    monkeypatch.setenv("SINK_HTTP_TOKEN", PROCESS_TOKEN)
    config = _mcp_config(command=None, args=[], url=http_url, headers={"Authorization": "Bearer ${SINK_HTTP_TOKEN}"})
    script = [R(tool_calls=[C("show_header", {"name": "Authorization"})]), R(text="ok")]
    rt, model = await make_runtime(_mcp_defs(), script, config=config)
    thread = await rt.create_thread("chat")
    await thread.send("go")

    assert [m["content"] for m in tool_messages(model.requests[1])] == ["Bearer ***"]
    assert not _leaks(await _sinks(rt, thread, model), PROCESS_TOKEN)


def test_orchestrator_tools_shows_a_failed_servers_stderr_without_its_token(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from click.testing import CliRunner

    from orchestrator.cli.main import main

    monkeypatch.setenv("SINK_CLI_TOKEN", PROCESS_TOKEN)
    broken = "import os, sys; print('rejected token', os.environ['TOK'], file=sys.stderr); sys.exit(1)"
    server = {"command": sys.executable, "args": ["-c", broken], "env": {"TOK": "${SINK_CLI_TOKEN}"}}
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"mcp_servers": {"broken": server}}))
    agents = Path(__file__).resolve().parents[2] / "agents"
    listed = CliRunner().invoke(main, ["tools", "--json", "--path", str(agents), "--config", str(config)])
    assert listed.exit_code == 1 and "rejected token ***" in listed.output
    assert not _leaks(listed.output, PROCESS_TOKEN)


def test_only_what_the_environment_fills_in_is_a_secret() -> None:
    from providers.mcp_config import McpServerConfig

    config = McpServerConfig(
        url="http://127.0.0.1:1/mcp",
        env={"LEVEL": "debug", "TOKEN": "${A}", "BOTH": "${B}:${MISSING:-fallback}"},
        headers={"Authorization": "Bearer ${C}", "Accept": "application/json"},
    )
    assert sorted(config.secret_values({"A": "alpha-value", "B": "beta-value", "C": "gamma-value"})) == [
        "alpha-value",
        "beta-value",
        "gamma-value",
    ]


async def _until(check: Any, timeout: float = 10.0) -> None:
    """Wait for what the server process writes (it keeps no clock we could fake)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


# -- recordings -------------------------------------------------------------------


@pytest.mark.parametrize("secret", list(AWKWARD.values()), ids=list(AWKWARD))
def test_a_recorded_stream_holds_no_escaped_secret(tmp_path: Any, secret: str) -> None:
    """A response body is kept as text, and an SSE body is JSON in text: a secret there reads escaped."""
    from providers.cassette import Cassette, Interaction, RecordedRequest, RecordedResponse

    chunk = json.dumps({"choices": [{"delta": {"content": f"the key is {secret}"}}]})
    exchange = Interaction(
        request=RecordedRequest(method="POST", url="http://model.invalid/v1", body={"q": secret}),
        response=RecordedResponse(status=200, body=f"data: {chunk}\n\ndata: [DONE]\n\n"),
    )
    Cassette(interactions=[exchange]).save(tmp_path / "c.json", secrets=[secret])
    text = (tmp_path / "c.json").read_text(encoding="utf-8")
    assert not _leaks(text, secret) and text.count("<redacted>") == 2
