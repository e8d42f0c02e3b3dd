"""Secrets never leave: not in logs, events, stored messages, cassettes or errors.

One thread with a thread-level and a user-level secret env value and a provider
API key from the environment goes through the paths where a secret could leak:
a provider error that echoes the key, an auth failure, a tool that reads both
secrets and puts them in its result, a custom event and a log line, a tool
whose exception message (and stack) carries one. Everything the runtime wrote
is then scanned for the values.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import structlog
from pydantic import BaseModel
from support import definitions
from test_faults_provider import OPENAI_KEY, C, F, R, Rig

from orchestrator import Side, define_agent, define_prompt, define_tool
from orchestrator.core.logs import configure_logging
from orchestrator.engine.executor import ExecutionFailed, ExecutionResult
from providers.cassette import record

THREAD_SECRET = "thread-secret-5b1f0c9e-value"
USER_SECRET = "user-secret-hunter2-8d77a1"
SECRETS = (THREAD_SECRET, USER_SECRET, OPENAI_KEY)


class Q(BaseModel):
    q: str = ""


def _make_defs(rig: Rig) -> Any:
    async def leak(state: Any, args: Q) -> dict:
        thread_value, user_value = await state.env("THREAD_TOKEN"), await state.env("USER_TOKEN")
        state.emit("leaky", {"thread": thread_value, "nested": [f"user={user_value}"]})
        structlog.get_logger("tools.leak").warning("leaking", token=thread_value, detail=f"user={user_value}")
        return {"status": "success", "result": f"thread={thread_value} user={user_value}"}

    async def boom(state: Any, args: Q) -> dict:
        value = await state.env("THREAD_TOKEN")
        raise RuntimeError(f"could not log in with {value}")

    tools = {
        "leak": define_tool(description="l", args=Q, execute=leak),
        "boom": define_tool(description="b", args=Q, execute=boom),
    }
    prompt = define_prompt(prompt="You use tools.", tool_description="t", tools=("leak", "boom"))
    agent = define_agent(type="ai_human", side_a=Side("pa", max_steps=4))
    return definitions(tools=tools, prompts={"pa": prompt}, agents={"ag": agent})


@pytest.fixture
def log_output() -> Any:
    buffer = io.StringIO()
    configure_logging("DEBUG", json=True, stream=buffer)
    try:
        yield buffer
    finally:
        structlog.reset_defaults()


def _leaks(where: str, text: str) -> list[str]:
    return [f"{where}: contains {secret[:10]}..." for secret in SECRETS if secret in text]


async def test_no_secret_reaches_logs_events_messages_cassette_or_errors(
    tmp_path: Path, log_output: io.StringIO
) -> None:
    script = [
        F(500, message=f"upstream failed while using key {OPENAI_KEY}"),
        F(401, message=f"Incorrect API key provided: {OPENAI_KEY}"),
        R(tool_calls=[C("leak", {}), C("boom", {})]),
        R(text="all done"),
    ]
    rig = Rig(tmp_path, script, attempts=1, make_defs=_make_defs)
    cassette = tmp_path / "secrets.json"
    errors: list[str] = []
    async with rig:
        runtime = rig.runtime
        assert runtime is not None
        await runtime.set_user_env("u1", "USER_TOKEN", USER_SECRET)
        thread = await runtime.create_thread("ag", user_id="u1")
        await runtime.storage.set_env("thread", thread.id, "THREAD_TOKEN", THREAD_SECRET, "secret")
        async with record(cassette):
            for text in ("first", "second", "third"):
                result = await rig.send(thread, text)
                if isinstance(result, ExecutionFailed):
                    errors += [str(result), repr(result.__cause__), json.dumps(result.result.reason)]
        assert isinstance(result, ExecutionResult) and result.output == "all done"
        messages = await rig.messages(thread)
        events = await rig.events(thread)

    assert len(errors) == 6, errors  # the 500 and the 401 each failed an execution
    stored = [m.model_dump_json() for m in messages]
    tool_texts = [m.content or "" for m in messages if m.role == "tool"]
    assert any("***" in t for t in tool_texts), tool_texts  # the tools did put the values there
    assert any("stack" in m.metadata for m in messages)
    assert [e for e in events if e.type == "leaky"], "the custom event was stored"
    assert "leaking" in log_output.getvalue()  # the tool's log line was written (redacted)

    found: list[str] = []
    found += _leaks("logs", log_output.getvalue())
    found += _leaks("events", "\n".join(e.model_dump_json() for e in events))
    found += _leaks("messages", "\n".join(stored))
    found += _leaks("cassette", cassette.read_text())
    found += _leaks("errors", "\n".join(errors))
    found += _leaks("request bodies sent to the model", json.dumps(rig.model.requests))
    assert not found, found


async def test_secret_used_as_a_mapping_key_is_redacted(tmp_path: Path, log_output: io.StringIO) -> None:
    """`state.emit("x", {secret: ...})` or a log field named by a secret: keys are data too."""
    rig = Rig(tmp_path, [R(text="unused")])
    async with rig:
        runtime = rig.runtime
        assert runtime is not None
        thread = await runtime.create_thread("ag")
        runtime.services.redactor.add(THREAD_SECRET)  # as state.env() does when a tool reads it
        runtime.services.bus.publish(thread.id, "leaky_key", {THREAD_SECRET: "value"})
        structlog.get_logger("t").warning("keyed", **{THREAD_SECRET: 1})
        events = await rig.events(thread)
    assert not _leaks("events", "\n".join(e.model_dump_json() for e in events)) + _leaks("logs", log_output.getvalue())


async def test_stdlib_logging_from_a_tool_is_redacted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A tool that logs with the standard library: the runtime's redaction should cover it too."""

    def make(rig: Rig) -> Any:
        async def chatty(state: Any, args: Q) -> dict:
            logging.getLogger("tools.chatty").warning("token is %s", await state.env("THREAD_TOKEN"))
            return {"status": "success", "result": "ok"}

        prompt = define_prompt(prompt="p", tool_description="t", tools=("chatty",))
        return definitions(
            tools={"chatty": define_tool(description="c", args=Q, execute=chatty)},
            prompts={"pa": prompt},
            agents={"ag": define_agent(type="ai_human", side_a=Side("pa"))},
        )

    rig = Rig(tmp_path, [R(tool_calls=[C("chatty", {})]), R(text="done")], make_defs=make)
    buffer = io.StringIO()
    configure_logging("DEBUG", stream=buffer)
    handler = logging.StreamHandler(buffer)
    logging.getLogger().addHandler(handler)
    try:
        async with rig:
            thread = await rig.runtime.create_thread("ag")  # type: ignore[union-attr]
            await rig.runtime.storage.set_env("thread", thread.id, "THREAD_TOKEN", THREAD_SECRET, "secret")  # type: ignore[union-attr]
            await rig.send(thread, "go")
    finally:
        logging.getLogger().removeHandler(handler)
        structlog.reset_defaults()
    assert "token is" in buffer.getvalue() + caplog.text
    assert THREAD_SECRET not in buffer.getvalue() + caplog.text


async def test_unconfigured_logging_is_quiet_and_redacted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A library user who never configures structlog: no info lines on stdout, warnings redacted on stderr."""
    structlog.reset_defaults()
    rig = Rig(tmp_path, [R(tool_calls=[C("leak", {})]), R(text="done")], make_defs=_make_defs)
    try:
        async with rig:
            await rig.runtime.set_user_env("u", "USER_TOKEN", USER_SECRET)  # type: ignore[union-attr]
            thread = await rig.runtime.create_thread("ag", user_id="u")  # type: ignore[union-attr]
            await rig.runtime.storage.set_env("thread", thread.id, "THREAD_TOKEN", THREAD_SECRET, "secret")  # type: ignore[union-attr]
            await rig.send(thread, "go")
    finally:
        structlog.reset_defaults()
    out, err = capsys.readouterr()
    assert "step" not in out and "leaking" not in out  # nothing on stdout
    assert "leaking" in err and "***" in err  # the tool's warning, redacted
    assert not _leaks("stderr", err)
