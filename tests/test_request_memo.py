"""Requests LiteLLM built, remembered across processes (providers/request_memo.py).

While `orchestrator run` imports LiteLLM in the background, a request whose arguments
match a remembered template is sent from it: these tests check that it is byte for byte
what LiteLLM's OpenAI config builds (the builder under test is LiteLLM's, via
`openai_wire.build_request`; the stream is read by the runtime's OpenAI wire reader),
that no secret reaches the file, and that the demo runs with LiteLLM unimportable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

import providers.client
from providers import request_memo
from providers.client import ModelClient
from providers.config import config_from_dict
from providers.sse import openai_events
from providers.stream import StreamEnd, TextDelta
from providers.streams import openai_wire
from providers.streams.openai_wire import build_request, recall_request

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-live-memo-0123456789abcdef"
TOKEN = "team-token-5f3e9a7c"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up an order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    }
]
FIRST = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is A1002?"}]
LATER = [
    *FIRST,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id":"A1"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped", "note": "caf\\u00e9 \\"ok\\""}'},
]


@pytest.fixture(autouse=True)
def memo_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("ORCHESTRATOR_REQUEST_MEMO", "1")  # tests/conftest.py turns it off for the other tests
    for name in ("OPENAI_ORGANIZATION", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    request_memo.forget()
    yield tmp_path
    request_memo.forget()


def _kwargs(messages: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {
        "model": "openai/gpt-4o-mini",
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "timeout": 30.0,
        "max_retries": 0,
        "num_retries": 0,
        "drop_params": False,
        "tools": TOOLS,
        "temperature": 0.2,
        "api_key": KEY,
        "api_base": "http://wire.invalid/v1",
        "extra_headers": {"X-Team-Token": TOKEN},
        **more,
    }


def _memo_text(home: Path) -> str:
    files = list((home / "orchestrator-runtime").glob("*.json"))
    return files[0].read_text() if files else ""


def test_a_recalled_request_is_what_litellm_builds_for_new_messages(memo_home: Path) -> None:
    build_request(_kwargs(FIRST), secrets=lambda: [KEY])
    request_memo.forget()  # as a new process would: read from the file

    recalled = recall_request(_kwargs(LATER))
    built = build_request(_kwargs(LATER))

    assert recalled is not None and recalled.early
    assert (recalled.url, recalled.headers, recalled.timeout) == (built.url, built.headers, built.timeout)
    assert recalled.content == built.content  # the same bytes, key order too
    assert recalled.headers["X-Team-Token"] == TOKEN and KEY in recalled.headers["Authorization"]


def test_the_memo_file_holds_no_key_and_no_header_value(memo_home: Path) -> None:
    build_request(_kwargs(FIRST), secrets=lambda: [KEY, TOKEN])
    text = _memo_text(memo_home)
    assert "lookup_order" in text  # the template is there...
    assert KEY not in text and TOKEN not in text  # ...without the secrets


def test_a_template_in_which_a_secret_remains_is_not_kept(memo_home: Path) -> None:
    build_request(_kwargs(FIRST, user="acct-secret-778899"), secrets=lambda: [KEY, "acct-secret-778899"])
    assert "acct-secret-778899" not in _memo_text(memo_home)
    assert recall_request(_kwargs(FIRST, user="acct-secret-778899")) is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"api_key": None}, "the key would come from the environment"),
        ({"api_base": None}, "the URL would come from the environment"),
        ({"temperature": 0.9}, "other parameters: another template"),
        ({"tools": TOOLS + TOOLS[:1]}, "other tools: another template"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, "content parts"),
        ({"messages": [{"role": "assistant", "content": "x", "reasoning_content": "r"}]}, "reasoning"),
    ],
)
def test_recall_only_what_the_template_determines(change: dict[str, Any], why: str) -> None:
    build_request(_kwargs(FIRST))
    assert recall_request(_kwargs(FIRST)) is not None
    assert recall_request(_kwargs(FIRST) | change) is None, why


def test_an_organization_from_the_environment_is_left_to_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    build_request(_kwargs(FIRST))
    monkeypatch.setenv("OPENAI_ORG_ID", "org-123")
    assert recall_request(_kwargs(FIRST)) is None


def test_prices_are_remembered_only_when_linear() -> None:
    request_memo.remember_rates("flat", lambda p, c: p * 2e-7 + c * 8e-7)
    request_memo.remember_rates("tiered", lambda p, c: p * (2e-7 if p < 200_000 else 4e-7) + c * 8e-7)
    request_memo.remember_unpriced("scripted/demo")
    request_memo.forget()
    assert request_memo.cost_from_memo("flat", 1000, 500) == pytest.approx(1000 * 2e-7 + 500 * 8e-7)
    assert request_memo.cost_from_memo("tiered", 1000, 500) is None
    assert request_memo.cost_from_memo("scripted/demo", 1000, 500) == 0.0


def test_off_switch(monkeypatch: pytest.MonkeyPatch, memo_home: Path) -> None:
    monkeypatch.setenv("ORCHESTRATOR_REQUEST_MEMO", "0")
    build_request(_kwargs(FIRST))
    assert _memo_text(memo_home) == ""


async def test_while_litellm_imports_the_client_sends_the_remembered_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole client path: the early request goes out on plain httpx and is read by the wire reader."""
    monkeypatch.setenv("MEMO_KEY", KEY)
    config = config_from_dict(
        {
            "providers": {"p": {"type": "openai", "api_key": "${MEMO_KEY}", "base_url": "http://wire.invalid/v1"}},
            "models": {"m": {"provider": "p", "model": "gpt-4o-mini", "retry": {"attempts": 1}}},
        }
    )
    bodies: list[bytes] = []
    for ready in (True, False):  # LiteLLM in: it builds (and the memo keeps); still importing: the memo builds
        monkeypatch.setattr(providers.client, "_litellm_ready", lambda ready=ready: ready)
        monkeypatch.setattr(openai_wire, "build_request", _refused if not ready else build_request)
        with respx.mock() as router:
            route = router.post("http://wire.invalid/v1/chat/completions").mock(
                return_value=httpx.Response(
                    200,
                    headers={"content-type": "text/event-stream"},
                    content=b"".join(openai_events("Shipped.", [], model="gpt-4o-mini", usage=(3, 2))),
                )
            )
            items = [item async for item in ModelClient(config).stream("m", FIRST, tools=TOOLS)]
        bodies.append(route.calls[0].request.content)
        assert [i.text for i in items if isinstance(i, TextDelta)] == ["Shipped."]
        assert isinstance(items[-1], StreamEnd) and items[-1].finish == "stop"
    assert bodies[0] == bodies[1]


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("LiteLLM is still importing: the request must come from the memo")


_NO_LITELLM = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "litellm" or name.startswith("litellm."):
            raise ImportError("litellm is still importing (test)")
sys.meta_path.insert(0, Refuse())
from orchestrator.cli.main import main
sys.argv = ["orchestrator", "run", "support_demo"]
main()
"""


@pytest.mark.slow
def test_the_demo_runs_from_the_memo_while_litellm_is_not_there(memo_home: Path) -> None:
    """The startup target (issue 17): once the demo ran on a machine, it needs no LiteLLM import to
    reach its first line. Here LiteLLM cannot be imported at all, and the demo still runs to its end."""
    env = {**os.environ, "XDG_CACHE_HOME": str(memo_home), "ORCHESTRATOR_REQUEST_MEMO": "1"}
    warm = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "run", "support_demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert warm.returncode == 0, warm.stderr[-2000:]
    cold = subprocess.run(
        [sys.executable, "-c", _NO_LITELLM], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert cold.returncode == 0, cold.stderr[-2000:]
    assert cold.stdout.count("[A · support_agent]") == warm.stdout.count("[A · support_agent]") >= 3
    assert "Stopped: end_conversation" in cold.stdout
