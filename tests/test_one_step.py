"""One step for a side's turn and for a prompt called as a tool: both loops make their requests through
`_Execution.answer`, so the nested one gets what the top level gets. Before, `nested._run_prompt` built
its own request: the `prefilter_llm_history` hook never saw it (a prompt called as a tool: requests
OUTER, INNER, OUTER, the hook saw OUTER, OUTER), images its tools returned went as a note, and its
steps had no `step_started` event and no step log line."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from support import Q, definitions, event_log

from orchestrator import Side, ToolResult, define_agent, define_hook, define_prompt, define_tool
from orchestrator.definitions.define import ToolAttachment
from orchestrator.engine import executor
from providers.scripted import ScriptedCall, ScriptedResponse

R = ScriptedResponse
C = ScriptedCall

OUTER, INNER = "You are side a.", "You research carefully."
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
PNG = base64.b64decode(PNG_B64)


async def _draw(state: Any, args: Q) -> ToolResult:
    attachment = ToolAttachment(name="dot.png", mime_type="image/png", data=PNG_B64, width=1, height=1)
    return ToolResult(status="success", result="drew it", attachments=[attachment])


def _defs(hooks: dict[str, Any] | None = None) -> Any:
    """Side a may call `researcher`, a prompt whose own tool draws a picture."""
    return definitions(
        tools={"draw": define_tool(description="Draw a picture", args=Q, execute=_draw)},
        prompts={
            "pa": define_prompt(prompt=OUTER, tool_description="side a", tools=("researcher",)),
            "researcher": define_prompt(prompt=INNER, tool_description="Research a question", tools=("draw",)),
        },
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
        hooks=hooks or {},
    )


IMAGES = {
    "providers": {"scripted": {"type": "scripted"}},
    "models": {"demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}, "supports_images": True}},
    "default_model": "demo",
}

SCRIPT = [
    R(tool_calls=[C("researcher", {"message": "Why is A1 late?"})]),  # outer a
    R(tool_calls=[C("draw", {"q": "a dot"})]),  # the nested researcher draws
    R(text="A1 waits for stock."),  # the nested researcher answers
    R(text="It waits for stock."),  # outer a answers
]


async def test_the_history_hook_sees_every_request_of_a_prompt_called_as_a_tool(make_runtime: Any) -> None:
    seen: list[tuple[str, list[str]]] = []

    def prefilter(state: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen.append((messages[0]["content"], list(state.execution.prompt_path)))
        return [*messages[:1], {"role": "system", "content": "filtered"}, *messages[1:]]

    hooks = {"prefilter_llm_history": define_hook("prefilter_llm_history", prefilter)}
    rt, model = await make_runtime(_defs(hooks), SCRIPT)
    thread = await rt.create_thread("chat")

    assert (await thread.send("Where is A1?")).output == "It waits for stock."

    assert [m["messages"][0]["content"] for m in model.requests] == [OUTER, INNER, INNER, OUTER]
    # every request passed the hook, the nested ones with the nested prompt's state
    assert seen == [(OUTER, ["pa"]), (INNER, ["pa", "researcher"]), (INNER, ["pa", "researcher"]), (OUTER, ["pa"])]
    assert all(m["messages"][1] == {"role": "system", "content": "filtered"} for m in model.requests)


class _Lines:
    """Stands in for the executor's logger: the lines it writes, as (event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


async def test_a_nested_step_is_announced_and_logged_like_a_sides(
    make_runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, _ = await make_runtime(_defs(), SCRIPT)
    thread = await rt.create_thread("chat")
    log = _Lines()
    monkeypatch.setattr(executor, "_log", log)

    await thread.send("Where is A1?")

    started = [e.data for e in await event_log(rt, thread) if e.type == "step_started"]
    assert [(d["side"], d["step"]) for d in started] == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]
    assert [(event, fields["step"]) for event, fields in log.lines] == [("step", n) for n in (1, 2, 3, 4)]
    assert thread.record.execution is not None and thread.record.execution.step_count == 4


async def test_a_nested_step_carries_the_images_its_tools_returned(make_runtime: Any) -> None:
    rt, model = await make_runtime(_defs(), SCRIPT, config=IMAGES)
    thread = await rt.create_thread("chat")

    await thread.send("Where is A1?")

    nested = model.requests[2]["messages"]  # the researcher's second request: after its drawing
    assert nested[0]["content"] == INNER
    assert nested[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Images returned by the tools above:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
        ],
    }
    assert "attached file" not in str(nested)
