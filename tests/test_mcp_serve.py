"""`orchestrator mcp-serve` end to end, driven by the MCP SDK's own client.

The server is the real command in a child process, over stdio and over Streamable HTTP on a free
loopback port, on tests/fixtures/mcp_serve (two exposed agents, one private one) and an offline model
(tests/fixtures/mcp_serve/answer.py) answered in that process. Its SQLite file is read afterwards to
check what a cancelled call left in the thread's history.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from orchestrator import ExecutionResult, Runtime
from orchestrator.cli.main import main
from orchestrator.storage import open_storage

ROOT = Path(__file__).resolve().parent.parent
PROJECT = Path(__file__).parent / "fixtures" / "mcp_serve"
STOP_WAIT = 20.0  # seconds a stopped execution may take to be recorded (it takes milliseconds)


def _command(db: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "orchestrator.cli.main",
        "mcp-serve",
        "--path",
        str(PROJECT / "agents"),
        "--config",
        str(PROJECT / "configs" / "default.yaml"),
        "--model",
        f"{PROJECT / 'answer.py'}:answer",
        "--db",
        str(db),
        "--max-input-bytes",
        "2000",
        *extra,
    ]


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


@contextlib.asynccontextmanager
async def _stdio(db: Path) -> AsyncIterator[Client]:
    command, *args = _command(db)
    params = StdioServerParameters(command=command, args=args, env=_env())
    async with Client(stdio_client(params)) as client:
        yield client


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = tmp_path_factory.mktemp("mcp_http") / "runs.sqlite"
    cmd = _command(db, "--transport", "http", "--port", str(port))
    proc = subprocess.Popen(cmd, env=_env(), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("mcp-serve --transport http did not start")
    yield f"http://127.0.0.1:{port}/mcp", db
    proc.terminate()
    proc.wait(10)


@contextlib.asynccontextmanager
async def _connected(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Client, Path]]:
    if transport == "stdio":
        db = tmp_path / "runs.sqlite"
        async with _stdio(db) as client:
            yield client, db
    else:
        url, db = request.getfixturevalue("http_server")
        async with Client(streamable_http_client(url)) as client:
            yield client, db


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_exposed_agents_are_listed_with_their_args_schemas(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with _connected(transport, tmp_path, request) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}

    assert sorted(tools) == ["clerk_agent", "report"]  # private_chat is not exposed
    assert tools["report"].description == "Writes a stock report"
    schema = tools["report"].input_schema
    assert schema["required"] == ["topic", "days"]
    assert schema["properties"]["days"] == {
        "type": "integer",
        "description": "How many days back",
        "minimum": 1,
        "maximum": 30,
    }
    assert tools["clerk_agent"].input_schema["required"] == ["message"]


async def test_a_call_runs_a_thread_and_reports_its_tool_calls_as_progress(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async with _connected(transport, tmp_path, request) as (client, db):
        result = await client.call_tool("clerk_agent", {"message": "please look A1 up"}, progress_callback=on_progress)

    assert not result.is_error
    assert [c.text for c in result.content] == ["done: A1 is in stock"]  # type: ignore[union-attr]
    assert progress == [(1.0, "calling lookup (A1)")]
    assert result.meta is not None
    async with open_storage(f"sqlite:///{db}") as storage:
        thread = await storage.get_thread(result.meta["thread_id"])
        messages = (await storage.get_messages(thread.id)).messages
    assert thread.agent_id == "clerk_agent"
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0].content == "please look A1 up"


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("report", {"topic": "lamps", "days": 99}, "days: Input should be less than or equal to 30"),
        ("report", {"days": 3}, "topic: Field required"),
        ("clerk_agent", {"message": "x" * 5000}, "bytes of JSON, at most 2000 are accepted"),
        ("private_chat", {"message": "hi"}, "no exposed agent named 'private_chat'"),
        ("nope", None, "(tools: clerk_agent, report)"),
        ("clerk_agent", {"message": "boom"}, "agent 'clerk_agent' failed (thread thr_"),
    ],
)
async def test_bad_calls_are_tool_errors_and_the_server_goes_on(
    tmp_path: Path, name: str, arguments: dict[str, Any] | None, expected: str
) -> None:
    async with _stdio(tmp_path / "runs.sqlite") as client:
        bad = await client.call_tool(name, arguments)
        good = await client.call_tool("clerk_agent", {"message": "hello"})

    assert bad.is_error
    assert expected in bad.content[0].text  # type: ignore[union-attr]
    assert not good.is_error and good.content[0].text == "echo: hello"  # type: ignore[union-attr]


async def test_cancelling_a_call_stops_the_execution_and_leaves_a_valid_history(
    transport: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    started = asyncio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if message == "calling slow (B2)":
            started.set()

    async with _connected(transport, tmp_path, request) as (client, db):
        call = asyncio.create_task(
            client.call_tool("clerk_agent", {"message": "do the slow one"}, progress_callback=on_progress)
        )
        await asyncio.wait_for(started.wait(), 30)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        after = await client.call_tool("clerk_agent", {"message": "still there?"})  # the server goes on
        thread_id = await _thread_of(db, "do the slow one")
        events = await _events_until_stopped(db, thread_id)

    assert after.content[0].text == "echo: still there?"  # type: ignore[union-attr]
    stopped = [e for e in events if e.type == "execution_stopped"]
    assert stopped and stopped[-1].data["stopped_by"] == "caller"
    async with open_storage(f"sqlite:///{db}") as storage:
        record = await storage.get_thread(thread_id)
        messages = (await storage.get_messages(thread_id)).messages
    assert record.status != "running"
    assert [m.role for m in messages] == ["user", "assistant"]  # the call, no result from the cancelled tool
    assert [c.name for c in messages[1].tool_calls] == ["slow"]
    resumed = await _send_again(db, thread_id, "hello again")  # the thread goes on: its history is valid
    assert resumed.output == "echo: hello again"  # answer.py checks every call of the request has its result


async def _send_again(db: Path, thread_id: str, text: str) -> ExecutionResult:
    model = f"{PROJECT / 'answer.py'}:answer"
    config = str(PROJECT / "configs" / "default.yaml")
    runtime = Runtime.from_path(PROJECT / "agents", config=config, storage=f"sqlite:///{db}", model=model)
    async with runtime:
        thread = await runtime.get_thread(thread_id)
        return await thread.send(text)


async def _thread_of(db: Path, first_message: str) -> str:
    async with open_storage(f"sqlite:///{db}") as storage:
        for record in await storage.list_threads(limit=100):
            messages = (await storage.get_messages(record.id)).messages
            if messages and messages[0].content == first_message:
                return record.id
    raise AssertionError(f"no thread began with {first_message!r}")


async def _events_until_stopped(db: Path, thread_id: str) -> list[Any]:
    """The thread's events once its execution has ended (the server records it as the cancel lands)."""
    deadline = time.monotonic() + STOP_WAIT
    while True:
        async with open_storage(f"sqlite:///{db}") as storage:
            events = await storage.events_after(thread_id, 0)
        if any(e.type in ("execution_stopped", "execution_failed") for e in events) or time.monotonic() > deadline:
            return events
        await asyncio.sleep(0.05)


def test_http_refuses_a_non_loopback_host() -> None:
    args = ["mcp-serve", "--path", str(PROJECT / "agents"), "--transport", "http", "--host", "0.0.0.0"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "no authentication yet" in result.output


def test_a_folder_without_exposed_agents_is_refused(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    config = str(PROJECT / "configs" / "default.yaml")
    result = CliRunner().invoke(main, ["mcp-serve", "--path", str(tmp_path), "--config", config])
    assert result.exit_code == 2
    assert "no agent has expose_as_tool=True" in result.output
