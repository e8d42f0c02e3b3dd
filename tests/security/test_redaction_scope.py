"""Attack: one user's secret rewrites another user's data (issue 15, item 3).

Bob stores secret env values that happen to be ordinary words of Alice's
data (`order`, `lookup_order`). Before secrets were scoped, one runtime-wide
redactor held every secret any thread had read, so Alice's stored tool result
became `{"***_id": ...}` and her events read `lookup_***`. Now a thread's
secrets redact that thread's output only; config keys and process secrets
still redact everywhere; a short secret is matched as a whole word only, and
one under four characters is refused.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import structlog
from pydantic import BaseModel
from support import definitions
from test_faults_provider import OPENAI_KEY, C, R, Rig

from orchestrator import Side, define_agent, define_prompt, define_tool
from orchestrator.core.logs import configure_logging
from orchestrator.core.secrets import Redactor, SecretScopes

BOB_LONG = "lookup_order"  # 12 characters: redacted wherever it occurs, in Bob's thread
BOB_SHORT = "order"  # 5 characters: redacted as a whole word, in Bob's thread
PROCESS_SECRET = "process-wide-secret-7f3a9c"


class Q(BaseModel):
    q: str = ""


def _defs(rig: Rig) -> Any:
    async def lookup_order(state: Any, args: Q) -> dict:
        return {"status": "success", "result": json.dumps({"order_id": 42, "status": "shipped in a border town"})}

    async def reveal(state: Any, args: Q) -> dict:
        long, short = await state.env("LONG"), await state.env("SHORT")
        process = await state.env("SEC_TEST_PROCESS_SECRET")
        state.emit("revealed", {"long": long, "text": f"my word is {short}, not border", "process": process})
        return {"status": "success", "result": f"long={long} short {short} border process={process}"}

    tools = {
        "lookup_order": define_tool(description="Find an order", args=Q, execute=lookup_order),
        "reveal": define_tool(description="Reveal", args=Q, execute=reveal),
    }
    prompt = define_prompt(prompt="You help.", tool_description="t", tools=("lookup_order", "reveal"))
    agent = define_agent(type="ai_human", side_a=Side("pa", max_steps=4))
    return definitions(tools=tools, prompts={"pa": prompt}, agents={"ag": agent})


@pytest.fixture
def process_secret() -> Any:
    os.environ["SEC_TEST_PROCESS_SECRET"] = PROCESS_SECRET
    yield PROCESS_SECRET
    os.environ.pop("SEC_TEST_PROCESS_SECRET", None)


@pytest.fixture
def log_output() -> Any:
    buffer = io.StringIO()
    configure_logging("DEBUG", json=True, stream=buffer)
    try:
        yield buffer
    finally:
        structlog.reset_defaults()


async def test_bobs_secret_does_not_rewrite_alices_data(
    tmp_path: Path, process_secret: str, log_output: io.StringIO
) -> None:
    script = [
        R(tool_calls=[C("reveal", {})]),
        R(text="bob done"),  # Bob's thread reads his secrets
        R(tool_calls=[C("lookup_order", {"q": "42"})]),
        R(text="alice done"),  # then Alice looks up her order
    ]
    rig = Rig(tmp_path, script, make_defs=_defs)
    async with rig:
        runtime = rig.runtime
        assert runtime is not None
        bob = await runtime.create_thread("ag", user_id="bob")
        await bob.state.set_env("LONG", BOB_LONG)
        await bob.state.set_env("SHORT", BOB_SHORT)
        await rig.send(bob, "reveal")
        await bob.state.set_env("OTHER", BOB_LONG)  # known secrets now, as Alice runs
        await bob.state.set_env("SHORT", BOB_SHORT)
        alice = await runtime.create_thread("ag", user_id="alice")
        await rig.send(alice, "where is my order?")
        structlog.get_logger("t").warning("alice logs", text=f"{PROCESS_SECRET} and more")
        alice_messages, alice_events = await rig.messages(alice), await rig.events(alice)
        bob_messages, bob_events = await rig.messages(bob), await rig.events(bob)

    alice_tool = next(m for m in alice_messages if m.role == "tool")
    assert json.loads(alice_tool.content or "") == {"order_id": 42, "status": "shipped in a border town"}
    alice_text = "\n".join(e.model_dump_json() for e in alice_events)
    assert "lookup_order" in alice_text and "***" not in alice_text

    bob_tool = next(m for m in bob_messages if m.role == "tool")
    assert bob_tool.content == "long=*** short *** border process=***"  # whole word only: "border" is not the secret
    revealed = next(e for e in bob_events if e.type == "revealed")
    assert revealed.data == {"long": "***", "text": "my word is ***, not border", "process": "***"}
    bob_text = "\n".join(e.model_dump_json() for e in bob_events) + "\n".join(m.model_dump_json() for m in bob_messages)
    assert BOB_LONG not in bob_text and PROCESS_SECRET not in bob_text and OPENAI_KEY not in bob_text
    logs = log_output.getvalue()
    assert "alice logs" in logs and PROCESS_SECRET not in logs  # a process secret: redacted everywhere


async def test_a_sub_agents_secret_stays_out_of_its_parent(tmp_path: Path) -> None:
    """A child thread's result becomes its parent's tool result: the child's secrets redact the parent too."""
    secret = "child-secret-value-91bd"

    def make(rig: Rig) -> Any:
        async def peek(state: Any, args: Q) -> dict:
            await state.set_env("CHILD_TOKEN", secret)
            return {"status": "success", "result": f"token {await state.env('CHILD_TOKEN')}"}

        inner = define_prompt(prompt="inner", tool_description="t", tools=("peek",))
        outer = define_prompt(prompt="outer", tool_description="t", tools=("helper",))
        helper = define_agent(
            type="ai_human", side_a=Side("inner", max_steps=3), expose_as_tool=True, tool_description="helps"
        )
        return definitions(
            tools={"peek": define_tool(description="p", args=Q, execute=peek)},
            prompts={"inner": inner, "outer": outer},
            agents={"ag": define_agent(type="ai_human", side_a=Side("outer", max_steps=4)), "helper": helper},
        )

    script = [
        R(tool_calls=[C("helper", {"message": "go"})]),
        R(tool_calls=[C("peek", {})]),
        R(text=f"the token was {secret}"),
        R(text="done"),
    ]
    rig = Rig(tmp_path, script, make_defs=make)
    async with rig:
        assert rig.runtime is not None
        parent = await rig.runtime.create_thread("ag")
        await rig.send(parent, "go")
        messages = await rig.messages(parent)
    tool = next(m for m in messages if m.role == "tool" and m.name == "helper")
    assert tool.content == "the token was ***"
    assert secret not in "\n".join(m.model_dump_json() for m in messages)


def test_short_secrets_match_whole_words_only_and_tiny_ones_never() -> None:
    redactor = Redactor(["order", "abc", "a-long-secret"])
    assert redactor.text("order, border, order_id, (order)") == "***, border, order_id, (***)"
    assert redactor.text("abc abcd") == "abc abcd"  # under 4 characters: never matched
    assert redactor.text("xa-long-secrety") == "x***y"  # long: anywhere
    assert redactor.data({"order": ["order", 1]}) == {"***": ["***", 1]}


def test_longest_secret_wins_so_no_part_of_it_survives() -> None:
    redactor = Redactor(["secret-value", "secret-value-and-more"])
    assert redactor.text("x secret-value-and-more y secret-value") == "x *** y ***"


def test_scopes_compile_once_and_keep_threads_apart() -> None:
    scopes = SecretScopes(["global-key-123456"])
    scopes.add("bob-secret-1234", "t_bob")
    alice = scopes.for_thread("t_alice")
    assert alice is scopes.for_thread("t_alice")  # cached until a secret joins the scope
    assert alice.text("bob-secret-1234 global-key-123456") == "bob-secret-1234 ***"
    assert scopes.for_thread("t_bob").text("bob-secret-1234") == "***"
    assert scopes.everywhere().text("bob-secret-1234") == "***"
    scopes.forget("t_bob")
    assert scopes.everywhere().text("bob-secret-1234") == "bob-secret-1234"


async def test_a_secret_too_short_to_redact_is_refused(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [], make_defs=_defs)
    async with rig:
        assert rig.runtime is not None
        thread = await rig.runtime.create_thread("ag", user_id="bob")
        with pytest.raises(ValueError, match="at least 4 characters"):
            await thread.state.set_env("PIN", "abc")
        with pytest.raises(ValueError, match="at least 4 characters"):
            await rig.runtime.set_user_env("bob", "PIN", "abc")
        await thread.state.set_env("PIN", "abc", "text")  # not a secret: fine
        assert await rig.runtime.storage.get_env("thread", thread.id, "PIN") is not None
