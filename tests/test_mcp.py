"""Tools from MCP servers, end to end against real servers.

The servers are tests/fixtures/mcp/server.py, written with the `mcp` SDK and
started for real: over stdio (a child process) and over Streamable HTTP on
127.0.0.1. The model is scripted: its OpenAI-wire SSE bytes are served by respx
and read by the runtime's own wire reader (providers/streams/openai_wire.py), so each
test checks what the next model request carried.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import definitions, tool_names

from orchestrator import Side, define_agent, define_prompt
from orchestrator.core.waiting import WaitingArgumentsError
from orchestrator.definitions.define import DefinitionError
from orchestrator.mcp import McpServerError, McpTools
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall
SERVER = str(Path(__file__).parent / "fixtures" / "mcp" / "server.py")
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def _config(**server: Any) -> dict[str, Any]:
    spec = {"command": sys.executable, "args": [SERVER], **server}
    return {
        "providers": {"scripted": {"type": "scripted"}},
        "models": {"demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}},
        "default_model": "demo",
        "mcp_servers": {"tools": spec},
    }


def _defs(tools: tuple[str, ...] = ("mcp:tools",)):
    prompts = {"pa": define_prompt(prompt="You help.", tool_description="side a", tools=tools)}
    return definitions(prompts=prompts, agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))})


def _tool_replies(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The same server over Streamable HTTP on a free loopback port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(port)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the MCP HTTP test server did not start")
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "stdio":
        return {}
    return {"command": None, "args": [], "url": request.getfixturevalue("http_url")}


async def test_a_model_calls_an_mcp_tool_and_the_result_reaches_the_next_request(
    make_runtime: Any, transport: dict[str, Any]
) -> None:
    script = [R(tool_calls=[C("add", {"a": 2, "b": 3})]), R(text="It is 5.")]
    rt, model = await make_runtime(_defs(), script, config=_config(**transport))
    thread = await rt.create_thread("chat")
    result = await thread.send("2+3?")

    assert result.output == "It is 5."
    assert "add" in tool_names(model.requests[0]) and "crash" in tool_names(model.requests[0])
    [reply] = _tool_replies(model.requests[1])
    assert reply["content"] == "5"


async def test_filters_and_prefix_decide_what_the_model_sees(make_runtime: Any) -> None:
    config = _config(include=["add", "echo", "fail"], exclude=["fail"], prefix="calc_")
    script = [R(tool_calls=[C("calc_echo", {"text": "hi"})]), R(text="done")]
    rt, model = await make_runtime(_defs(("mcp:tools",)), script, config=config)
    await (await rt.create_thread("chat")).send("go")

    assert tool_names(model.requests[0]) == ["calc_add", "calc_echo"]
    assert _tool_replies(model.requests[1])[0]["content"] == "hi"


async def test_one_tool_by_name(make_runtime: Any) -> None:
    rt, model = await make_runtime(_defs(("mcp:tools/echo",)), [R(text="ok")], config=_config())
    await (await rt.create_thread("chat")).send("go")
    assert tool_names(model.requests[0]) == ["echo"]


async def test_a_tool_the_server_does_not_allow_is_a_clear_error(make_runtime: Any) -> None:
    rt, _ = await make_runtime(_defs(("mcp:tools/fail",)), [R(text="ok")], config=_config(exclude=["fail"]))
    thread = await rt.create_thread("chat")
    with pytest.raises(DefinitionError, match=r"'mcp:tools/fail': MCP server 'tools' offers no allowed tool 'fail'"):
        await thread.send("go")


async def test_an_unknown_server_is_refused_when_the_runtime_opens(make_runtime: Any) -> None:
    with pytest.raises(DefinitionError, match=r"prompt 'pa'.*'mcp:github'.*not under mcp_servers.*known: tools"):
        await make_runtime(_defs(("mcp:github",)), [R(text="ok")], config=_config())


async def test_a_tool_error_is_an_error_result_and_the_execution_goes_on(make_runtime: Any) -> None:
    script = [R(tool_calls=[C("fail", {"message": "no such order"})]), R(text="Sorry.")]
    rt, model = await make_runtime(_defs(), script, config=_config())
    thread = await rt.create_thread("chat")
    result = await thread.send("go")

    assert result.output == "Sorry."
    [reply] = _tool_replies(model.requests[1])
    assert "no such order" in reply["content"]
    stored = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    assert stored[0].tool_status == "error"


async def test_bad_arguments_are_an_error_the_model_can_correct_and_never_reach_the_server(
    make_runtime: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    script = [R(tool_calls=[C("slow", {"seconds": "long", "marker": str(marker)})]), R(text="oops")]
    rt, model = await make_runtime(_defs(), script, config=_config())
    await (await rt.create_thread("chat")).send("go")

    [reply] = _tool_replies(model.requests[1])
    assert "Invalid arguments for 'slow'" in reply["content"] and "$.seconds" in reply["content"]
    assert not marker.exists()


async def test_free_form_arguments_reach_the_server_unchanged(make_runtime: Any) -> None:
    settings = {"apn": "internet", "mtu": 1500, "ratio": 1.0, "empty": "", "nested": [[1, "ü"], {"b": None}]}
    script = [R(tool_calls=[C("set_settings", {"name": "phone", "settings": settings})]), R(text="set")]
    rt, model = await make_runtime(_defs(), script, config=_config())
    await (await rt.create_thread("chat")).send("go")

    echoed = json.loads(_tool_replies(model.requests[1])[0]["content"])
    assert echoed == {"name": "phone", "settings": settings}
    assert list(echoed["settings"]) == list(settings) and isinstance(echoed["settings"]["ratio"], float)


async def test_a_call_over_its_timeout_is_cancelled_on_the_server(make_runtime: Any, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = [R(tool_calls=[C("slow", {"seconds": 30, "marker": str(marker)})]), R(text="too slow")]
    rt, model = await make_runtime(_defs(), script, config=_config(timeout=1))
    await (await rt.create_thread("chat")).send("go")

    [reply] = _tool_replies(model.requests[1])
    assert "timed out" in reply["content"]
    await _until(lambda: marker.read_text() == "cancelled")


async def test_stop_cancels_a_running_mcp_call(make_runtime: Any, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = [R(tool_calls=[C("slow", {"seconds": 30, "marker": str(marker)})]), R(text="never")]
    rt, model = await make_runtime(_defs(), script, config=_config())
    thread = await rt.create_thread("chat")
    task = asyncio.create_task(thread.send("go"))
    await _until(lambda: marker.exists() and marker.read_text() == "started")
    thread.stop()
    result = await asyncio.wait_for(task, 10)

    assert result.reason == "stopped" or result.stopped_by is not None
    assert len(model.requests) == 1
    await _until(lambda: marker.read_text() == "cancelled")


async def test_a_server_that_dies_mid_call_is_an_error_result_then_restarts(make_runtime: Any) -> None:
    script = [R(tool_calls=[C("crash", {})]), R(tool_calls=[C("add", {"a": 1, "b": 1})]), R(text="recovered")]
    rt, model = await make_runtime(_defs(), script, config=_config())
    result = await (await rt.create_thread("chat")).send("go")

    assert result.output == "recovered"
    crash = _tool_replies(model.requests[1])[0]["content"]
    assert "MCP server 'tools' failed during 'crash'" in crash and "crashing on purpose" in crash
    assert _tool_replies(model.requests[2])[1]["content"] == "2"


async def test_an_image_result_becomes_an_attachment(make_runtime: Any) -> None:
    rt, _ = await make_runtime(_defs(), [R(tool_calls=[C("picture", {})]), R(text="a pixel")], config=_config())
    thread = await rt.create_thread("chat")
    await thread.send("draw")

    [tool_message] = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    [ref] = tool_message.attachments
    assert ref.mime_type == "image/png" and ref.name == "picture_0.png"
    _, data = await rt.storage.get_file(thread.id, ref.id)
    assert data == base64.b64decode(PNG_B64)


async def test_an_embedded_resource_is_part_of_the_text(make_runtime: Any) -> None:
    script = [R(tool_calls=[C("document", {})]), R(text="read")]
    rt, model = await make_runtime(_defs(), script, config=_config())
    await (await rt.create_thread("chat")).send("go")
    content = _tool_replies(model.requests[1])[0]["content"]
    assert "see the notes" in content and "[resource file:///notes.txt]\nthe notes" in content


async def test_progress_notifications_become_events(make_runtime: Any) -> None:
    rt, _ = await make_runtime(_defs(), [R(tool_calls=[C("count", {"steps": 3})]), R(text="ok")], config=_config())
    thread = await rt.create_thread("chat")
    await thread.send("count")

    events = [e for e in await rt.storage.events_after(thread.id, 0) if e.type == "tool_progress"]
    assert [(e.data["progress"], e.data["total"], e.data["message"]) for e in events] == [
        (1, 3, "step 1"),
        (2, 3, "step 2"),
        (3, 3, "step 3"),
    ]
    assert {e.data["name"] for e in events} == {"count"} and all(e.data["tool_call_id"] for e in events)


async def test_tool_call_started_carries_the_configured_progress_argument(make_runtime: Any) -> None:
    config = _config(progress_arguments={"echo": "text"})
    rt, _ = await make_runtime(_defs(), [R(tool_calls=[C("echo", {"text": "Oslo"})]), R(text="ok")], config=config)
    thread = await rt.create_thread("chat")
    await thread.send("go")

    [started] = [e for e in await rt.storage.events_after(thread.id, 0) if e.type == "tool_call_started"]
    assert started.data["name"] == "echo" and started.data["progress_value"] == "Oslo"


async def test_a_servers_tool_can_need_approval(make_runtime: Any) -> None:
    """`needs_approval: [echo]`: the call waits, the server is not called until approved (issue 46)."""
    config = _config(needs_approval=["echo"])
    script = [R(tool_calls=[C("echo", {"text": "Oslo"}), C("count", {"steps": 1})]), R(text="ok")]
    rt, model = await make_runtime(_defs(), script, config=config)
    thread = await rt.create_thread("chat")
    assert (await thread.send("go")).reason == "awaiting_approval"
    [waiting] = await thread.waiting_calls()
    assert (waiting.tool, waiting.arguments) == ("echo", {"text": "Oslo"})
    task = await thread.approve(waiting.call_id)
    assert task is not None
    await task
    assert len(_tool_replies(model.requests[1])) == 2 and "Oslo" in json.dumps(_tool_replies(model.requests[1]))


async def test_edited_arguments_for_a_servers_tool_are_checked_against_its_listed_schema(make_runtime: Any) -> None:
    """Approving with arguments the server's schema refuses names the field and changes nothing; fitting
    ones are what the server is called with."""
    config = _config(needs_approval=["echo"])
    script = [R(tool_calls=[C("echo", {"text": "Oslo"})]), R(text="ok")]
    rt, model = await make_runtime(_defs(), script, config=config)
    thread = await rt.create_thread("chat")
    assert (await thread.send("go")).reason == "awaiting_approval"
    [waiting] = await thread.waiting_calls()
    with pytest.raises(WaitingArgumentsError, match="text"):
        await thread.approve(waiting.call_id, args={"text": 42})
    [still] = await thread.waiting_calls()
    assert still.decision is None
    task = await thread.approve(waiting.call_id, args={"text": "Bergen"})
    assert task is not None
    await task
    replies = json.dumps(_tool_replies(model.requests[1]))
    assert "Bergen" in replies and "Oslo" not in replies


async def test_a_stdio_server_sees_only_the_env_it_was_given(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_ONLY_SECRET", "do-not-pass")
    monkeypatch.setenv("GIVEN", "passed on")
    names = ("HOST_ONLY_SECRET", "DECLARED", "LITERAL")
    calls = [C("show_env", {"name": name}) for name in names]
    config = _config(env={"DECLARED": "${GIVEN}", "LITERAL": "as written"})
    rt, model = await make_runtime(_defs(), [R(tool_calls=calls), R(text="ok")], config=config)
    await (await rt.create_thread("chat")).send("go")

    # What the environment filled in is a secret of the process: it came back, redacted.
    assert [m["content"] for m in _tool_replies(model.requests[1])] == ["(unset)", "***", "as written"]


async def test_a_config_secret_a_server_sends_back_is_redacted(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-test-0123456789abcdefghijklmnop"
    monkeypatch.setenv("MY_PROVIDER_KEY", key)
    config = _config(env={"TOKEN": "${MY_PROVIDER_KEY}"})
    config["providers"]["other"] = {"type": "openai", "api_key": "${MY_PROVIDER_KEY}"}
    script = [R(tool_calls=[C("show_env", {"name": "TOKEN"})]), R(text="ok")]
    rt, _ = await make_runtime(_defs(), script, config=config)
    thread = await rt.create_thread("chat")
    await thread.send("go")

    [tool_message] = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    assert key not in (tool_message.content or "") and "***" in (tool_message.content or "")


@pytest.mark.parametrize("scope", ["runtime", "thread"])
async def test_sessions_per_runtime_or_per_thread_and_closed_with_the_runtime(make_runtime: Any, scope: str) -> None:
    script = [R(tool_calls=[C("pid", {})]), R(text="one"), R(tool_calls=[C("pid", {})]), R(text="two")]
    rt, model = await make_runtime(_defs(), script, config=_config(scope=scope))
    await (await rt.create_thread("chat")).send("first")
    await (await rt.create_thread("chat")).send("second")
    pids = {int(_tool_replies(model.requests[i])[0]["content"]) for i in (1, 3)}

    assert len(pids) == (1 if scope == "runtime" else 2)
    await rt.close()
    for pid in pids:
        await _until(lambda pid=pid: not _alive(pid))


async def test_a_session_whose_start_is_cancelled_does_not_leave_its_server_running() -> None:
    """A stopped tool (or a cancelled listing) cancels the start of the session it needs. The session
    was in no list yet, so nothing closed it: its server ran, and its holder task waited, until the host
    process exited."""
    config = config_from_dict(_config())
    tools = McpTools(config.mcp_servers, lambda text: text)
    before = set(_children_running(SERVER))  # other tests' servers (the HTTP one lives for the module)
    listing = asyncio.ensure_future(tools.listing("tools"))
    await _until(lambda: set(_children_running(SERVER)) - before)  # spawned; the handshake has not finished
    [pid] = set(_children_running(SERVER)) - before
    listing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await listing
    await tools.close()
    await _until(lambda: not _alive(pid))


def _children_running(script: str) -> list[int]:
    """This process's children whose command line runs `script`."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline") as cmdline, open(f"/proc/{entry}/stat") as stat:
                command, fields = cmdline.read(), stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if script in command and int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting to be reaped is gone for our purposes
        return stat.read().split()[2] != "Z"


async def test_a_server_that_cannot_start_names_itself_and_its_stderr() -> None:
    script = "import sys; print('bad flag --root', file=sys.stderr); sys.exit(2)"
    config = config_from_dict({"mcp_servers": {"broken": {"command": sys.executable, "args": ["-c", script]}}})
    tools = McpTools(config.mcp_servers, lambda text: text)
    try:
        with pytest.raises(McpServerError, match=r"(?s)MCP server 'broken' could not start.*bad flag --root"):
            await tools.listing("broken")
    finally:
        await tools.close()


async def test_an_optional_argument_is_strict_and_nullable_and_a_null_reaches_the_server_as_left_out(
    make_runtime: Any,
) -> None:
    """The server lists `greeting` as optional: sent to OpenAI as strict mode wants it (required, nullable), and the
    model's null for it is left out of the call, so the server uses its default (before: `strict: false`, and a
    null was refused as not a string)."""
    script = [R(tool_calls=[C("greet", {"name": "Ada", "greeting": None})]), R(text="done")]
    rt, model = await make_runtime(_defs(("mcp:tools/greet",)), script, config=_config())
    await (await rt.create_thread("chat")).send("go")

    [function] = [t["function"] for t in model.requests[0]["tools"]]
    assert function["strict"] is True
    assert function["parameters"]["required"] == ["name", "greeting"]
    assert {"type": "null"} in function["parameters"]["properties"]["greeting"]["anyOf"]
    assert _tool_replies(model.requests[1])[0]["content"] == "Hello, Ada!"


def test_config_errors_name_the_field() -> None:
    from providers.config import ConfigError

    with pytest.raises(ConfigError, match=r"mcp_servers\.fs: set exactly one of `command` \(stdio\) or `url`"):
        config_from_dict({"mcp_servers": {"fs": {"command": "x", "url": "http://127.0.0.1:1/mcp"}}})
    with pytest.raises(ConfigError, match=r"mcp_servers\.fs\.headers: Authorization: looks like a literal API key"):
        config_from_dict(
            {"mcp_servers": {"fs": {"url": "http://x/mcp", "headers": {"Authorization": "sk-" + "a1" * 15}}}}
        )
    with pytest.raises(ConfigError, match=r"mcp_servers\.fs\.timout: unknown field"):
        config_from_dict({"mcp_servers": {"fs": {"command": "x", "timout": 3}}})


def test_cli_lists_mcp_tools_and_check_reports_a_server_that_cannot_start(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from orchestrator.cli.main import main

    config = tmp_path / "config.yaml"
    broken = "import sys; print('no token given', file=sys.stderr); sys.exit(1)"
    config.write_text(
        json.dumps(
            {
                "mcp_servers": {
                    "tools": {"command": sys.executable, "args": [SERVER], "include": ["add", "set_settings"]},
                    "broken": {"command": sys.executable, "args": ["-c", broken]},
                },
            }
        )
    )
    agents = Path(__file__).resolve().parent.parent / "agents"
    listed = CliRunner().invoke(main, ["tools", "--json", "--path", str(agents), "--config", str(config)])
    assert listed.exit_code == 1 and "MCP server 'broken' could not start" in listed.output

    config.write_text(json.dumps({"mcp_servers": {"tools": json.loads(config.read_text())["mcp_servers"]["tools"]}}))
    listed = CliRunner().invoke(main, ["tools", "--json", "--path", str(agents), "--config", str(config)])
    entries = {e["name"]: e for e in json.loads(listed.output) if e["kind"] == "mcp"}
    assert set(entries) == {"add", "set_settings"}
    assert entries["set_settings"]["strict"] is False and entries["set_settings"]["server"] == "tools"
    assert entries["add"]["strict"] is True

    config.write_text(json.dumps({"mcp_servers": {"broken": {"command": sys.executable, "args": ["-c", broken]}}}))
    checked = CliRunner().invoke(main, ["check", str(agents), "--config", str(config)])
    assert checked.exit_code == 1
    assert "mcp_servers.broken: MCP server 'broken' could not start" in checked.output
    assert "no token given" in checked.output


async def _until(check: Any, timeout: float = 10.0) -> None:
    """Wait for something a separate server process does (it keeps no clock we could fake)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)
