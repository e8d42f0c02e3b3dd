"""The official AG-UI JavaScript client against a live server: `@ag-ui/client`'s HttpAgent, on Node.

tests/agui_client/ holds the client (package.json and package-lock.json, installed here with `npm ci`
when its node_modules are missing) and run.mjs, which drives one scenario and prints what the client
saw. The client verifies the event order itself: a misplaced event fails its run, and run.mjs exits 1.
The server runs an ai_human agent on a scripted model (respx, in this process) behind uvicorn on a free
port. Node is required, not optional: CI installs it (.ci/run), so a missing one fails here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_agui import agui_defs

from orchestrator.runtime import Runtime
from orchestrator.server.app import create_app
from orchestrator.server.testing import LiveServer
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

R = ScriptedResponse
CLIENT = Path(__file__).resolve().parent / "agui_client"
TOKEN = "agui-token"
CONFIG = {
    "providers": {"scripted": {"type": "scripted"}},
    "models": {"demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}},
    "default_model": "demo",
}


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    assert found is not None, "node is required for the AG-UI client test (apt-get install -y nodejs npm)"
    if not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        npm = shutil.which("npm")
        assert npm is not None, "npm is required to install @ag-ui/client (apt-get install -y npm)"
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=CLIENT, check=True, timeout=240)
    return found


@contextmanager
def live(tmp_path: Path, script: list[Any]) -> Iterator[LiveServer]:
    runtime = Runtime(agui_defs(), config=config_from_dict(CONFIG), storage=SQLiteStorage(str(tmp_path / "agui.db")))
    app = create_app(runtime, tokens={TOKEN: "agui-user"}, own_runtime=True)
    with ScriptedModel(script).serving(), LiveServer(app) as server:
        yield server


def client(node: str, scenario: str, server: LiveServer, thread_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [node, "run.mjs", scenario, server.url, TOKEN, thread_id],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"the AG-UI client failed:\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def get(server: LiveServer, path: str) -> Any:
    """Plain urllib: respx patches httpx in this process, and the server's own calls must stay scripted."""
    request = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def test_a_conversation_with_a_server_tool_and_state(node: str, tmp_path: Path) -> None:
    script = [
        R(text="Let me look.", tool_calls=[ScriptedCall("weather", {"city": "Oslo"})]),
        R(text="It is sunny in Oslo."),
        R(text="You are welcome."),
    ]
    with live(tmp_path, script) as server:
        seen = client(node, "conversation", server, "agui-thread-1")
        messages = get(server, "/threads/agui-thread-1/messages")["messages"]
    first, second = seen["runs"]
    assert first["events"][0] == "RUN_STARTED" and first["events"][-1] == "RUN_FINISHED"
    for kind in ("STATE_SNAPSHOT", "STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_RESULT", "STATE_DELTA"):
        assert kind in first["events"], kind
    assert first["result"]["reason"] == "rest"
    assert second["events"][-1] == "RUN_FINISHED"
    assert seen["state"] == {"cities": ["Oslo"]}  # the snapshot, then the tool's change as a JSON Patch
    said = [(m["role"], m["content"]) for m in seen["messages"] if m["role"] in ("user", "assistant")]
    assert said == [
        ("user", "Weather in Oslo?"),
        ("assistant", "Let me look."),
        ("assistant", "It is sunny in Oslo."),
        ("user", "Thanks!"),
        ("assistant", "You are welcome."),
    ]
    calls = [c for m in seen["messages"] for c in m["toolCalls"]]
    assert calls == [{"name": "weather", "arguments": '{"city": "Oslo"}'}]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def test_the_client_aborting_stops_the_execution_and_the_thread_goes_on(node: str, tmp_path: Path) -> None:
    story = R(text="Once upon a time there was a very long story. " * 10, chunk_size=4, hang_after=4)
    with live(tmp_path, [story, R(text="Short one.")]) as server:
        seen = client(node, "abort", server, "agui-thread-2")
        deadline = time.monotonic() + 20
        while (thread := get(server, "/threads/agui-thread-2"))["running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert thread["status"] == "stopped", thread
        assert thread["execution"]["stopped_by"] == "caller"
        assert thread["execution"]["reason"] == "AG-UI client aborted the run"
        messages = get(server, "/threads/agui-thread-2/messages")["messages"]
        again = client(node, "conversation", server, "agui-thread-2")  # the stopped thread takes the next run
    assert "ABORTED" in seen["events"] and "RUN_FINISHED" not in seen["events"]
    assert not seen["running"]
    assert [m["role"] for m in messages] == ["user"]  # the cut answer is not kept as if it were whole
    assert again["runs"][0]["events"][-1] == "RUN_FINISHED"
