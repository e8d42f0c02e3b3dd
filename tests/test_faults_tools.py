"""Tool faults: a tool that raises, hangs, never returns, returns junk or too
much, queues itself forever, or invokes in a cycle. Each ends as one error (or
truncated) result the model can read, the thread stays consistent, and a later
run of it works. Scenarios return an `Outcome` for `bench/faults.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support import definitions, wait_until_cancelled
from test_faults_provider import LATER, C, Outcome, R, Rig, consistency, later_run_works

from orchestrator import Side, define_agent, define_prompt, define_tool
from orchestrator.core.settings import RuntimeSettings
from orchestrator.engine.executor import ExecutionResult

MAX_RESULT = 5_000
MAX_QUEUED = 4


class Q(BaseModel):
    q: str = ""


def _defs(tools: dict[str, Any], exposed: tuple[str, ...]):
    def make(rig: Rig) -> Any:
        prompt = define_prompt(prompt="You use tools.", tool_description="user of tools", tools=exposed)
        agent = define_agent(type="ai_human", side_a=Side("pa", max_steps=4))
        return definitions(tools=tools, prompts={"pa": prompt}, agents={"ag": agent})

    return make


@asynccontextmanager
async def _one_call(
    tmp: Path, tools: dict[str, Any], call: str, *, settings: RuntimeSettings | None = None
) -> AsyncIterator[tuple[Rig, Any, Any]]:
    """Side a calls `call` once, reads the result, answers "done"; yields (rig, thread, tool messages)."""
    tmp.mkdir(parents=True, exist_ok=True)
    rig = Rig(
        tmp,
        [R(tool_calls=[C(call, {"q": "x"})]), R(text="done"), LATER],
        make_defs=_defs(tools, tuple(tools)),
        settings=settings,
    )
    async with rig:
        thread = await rig.runtime.create_thread("ag")  # type: ignore[union-attr]
        result = await rig.send(thread, "go")
        assert isinstance(result, ExecutionResult) and result.output == "done", result
        tools_msgs = [m for m in await rig.messages(thread) if m.role == "tool"]
        yield rig, thread, tools_msgs


async def _finish(rig: Rig, thread: Any, fault: str, result: str) -> Outcome:
    dup, dup_runs = await consistency(rig, thread)
    await later_run_works(rig, thread)
    return Outcome(fault, result, dup, dup_runs)


def _sent_to_model(rig: Rig, index: int) -> str:
    return repr(rig.model.requests[index]["messages"])


# -- scenarios -------------------------------------------------------------------------


async def tool_raises(tmp: Path) -> Outcome:
    async def boom(state: Any, args: Q) -> dict:
        raise ValueError("kaboom in the tool")

    async with _one_call(tmp, {"boom": define_tool(description="b", args=Q, execute=boom)}, "boom") as (
        rig,
        thread,
        [tool],
    ):
        assert tool.tool_status == "error"
        assert tool.content == "Tool 'boom' failed: ValueError: kaboom in the tool"
        assert "Traceback" in tool.metadata["stack"] and "kaboom in the tool" in tool.metadata["stack"]
        seen = _sent_to_model(rig, 1)
        assert "kaboom in the tool" in seen and "Traceback" not in seen  # the model sees the error, not the stack
        return await _finish(rig, thread, "tool raises an exception", "error result; stack kept in metadata only")


async def tool_times_out(tmp: Path) -> Outcome:
    async def slow(state: Any, args: Q) -> dict:
        await asyncio.sleep(3600)
        return {"status": "success", "result": "never"}

    tool_def = define_tool(description="s", args=Q, execute=slow, timeout=0.2)
    async with _one_call(tmp, {"slow": tool_def}, "slow") as (rig, thread, [tool]):
        assert tool.tool_status == "error" and tool.content == "Tool 'slow' timed out after 0.2 s"
        return await _finish(rig, thread, "tool times out", "error result after the tool's timeout")


async def tool_never_returns_until_aborted(tmp: Path) -> Outcome:
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def forever(state: Any, args: Q) -> dict:
        await wait_until_cancelled(entered, cancelled)
        return {}

    tools = {"forever": define_tool(description="f", args=Q, execute=forever)}
    rig = Rig(
        tmp,
        [R(tool_calls=[C("forever", {})]), LATER],
        make_defs=_defs(tools, ("forever",)),
        settings=RuntimeSettings(tool_timeout=3600),
    )
    async with rig:
        thread = await rig.runtime.create_thread("ag")  # type: ignore[union-attr]
        run = asyncio.create_task(thread.send("go"))
        await asyncio.wait_for(entered.wait(), 10)
        thread.stop("user abort")
        result = await asyncio.wait_for(run, 10)
        assert cancelled.is_set() and result.reason == "user abort"
        assert (await thread.refresh()).status == "stopped"
        messages = await rig.messages(thread)
        assert [m.role for m in messages] == ["user", "assistant"]  # the call; no result from the cancelled tool
        await later_run_works(rig, thread)
        # The next request must be one a provider accepts: every tool call answered.
        sent = rig.model.requests[-1]["messages"]
        calls = {c["id"] for m in sent for c in m.get("tool_calls") or []}
        answered = {m["tool_call_id"] for m in sent if m.get("role") == "tool"}
        assert calls <= answered, f"tool calls without a result sent to the provider: {calls - answered}"
    return Outcome("tool never returns (aborted)", "tool cancelled, thread stopped; next run ok", 0, 0)


async def tool_returns_unserialisable(tmp: Path) -> Outcome:
    async def junk(state: Any, args: Q) -> Any:
        return {"status": "success", "result": object()}

    async def not_a_result(state: Any, args: Q) -> Any:
        return {1, 2, 3}

    tools = {"junk": define_tool(description="j", args=Q, execute=junk)}
    async with _one_call(tmp, tools, "junk") as (rig, thread, [tool]):
        assert tool.tool_status == "error" and "Tool 'junk' returned an invalid result" in (tool.content or "")
        outcome = await _finish(rig, thread, "tool returns a non-serialisable value", "error result naming the tool")
    async with _one_call(
        tmp / "set", {"weird": define_tool(description="w", args=Q, execute=not_a_result)}, "weird"
    ) as (rig2, thread2, [tool2]):
        assert tool2.tool_status == "error" and "returned set" in (tool2.content or "")
        await _finish(rig2, thread2, "", "")
    return outcome


async def tool_returns_10mb(tmp: Path) -> Outcome:
    big = "0123456789" * 1_000_000

    async def huge(state: Any, args: Q) -> dict:
        return {"status": "success", "result": big}

    settings = RuntimeSettings(max_tool_result_chars=MAX_RESULT)
    async with _one_call(
        tmp, {"huge": define_tool(description="h", args=Q, execute=huge)}, "huge", settings=settings
    ) as (rig, thread, [tool]):
        content = tool.content or ""
        assert content.startswith(big[:MAX_RESULT]) and len(content) < MAX_RESULT + 200
        assert f"[result truncated: {len(big)} characters, showing the first {MAX_RESULT}]" in content
        assert len(_sent_to_model(rig, 1)) < MAX_RESULT + 2_000  # the model got the truncated text too
        return await _finish(rig, thread, "tool returns 10 MB", f"truncated to {MAX_RESULT} chars with a note")


async def tool_queues_itself_forever(tmp: Path) -> Outcome:
    runs: list[int] = []

    async def again(state: Any, args: Q) -> dict:
        runs.append(len(runs))
        state.queue_tool("again", {"q": str(len(runs))})
        return {"status": "success", "result": f"run {len(runs)}"}

    settings = RuntimeSettings(max_queued_tools=MAX_QUEUED)
    tools = {"again": define_tool(description="a", args=Q, execute=again, uses=("again",))}
    async with _one_call(tmp, tools, "again", settings=settings) as (rig, thread, tool_msgs):
        assert len(runs) == 1 + MAX_QUEUED  # the model's call, then the queue bound
        assert [m.tool_status for m in tool_msgs] == ["success"] * (1 + MAX_QUEUED) + ["error"]
        assert "queue limit reached" in (tool_msgs[-1].content or "")
        return await _finish(
            rig, thread, "tool queues itself forever", f"bounded at {MAX_QUEUED} queued runs; clear error"
        )


async def invoke_cycle(tmp: Path) -> Outcome:
    async def ping(state: Any, args: Q) -> Any:
        return await state.invoke_tool("pong", {"q": "from ping"})

    async def pong(state: Any, args: Q) -> Any:
        return await state.invoke_tool("ping", {"q": "from pong"})

    tools = {
        "ping": define_tool(description="p", args=Q, execute=ping, uses=("pong",)),
        "pong": define_tool(description="p", args=Q, execute=pong, uses=("ping",)),
    }
    async with _one_call(tmp, tools, "ping") as (rig, thread, [tool]):
        assert tool.tool_status == "error" and "invoke_tool cycle: ping -> pong -> ping" in (tool.content or ""), (
            tool.content
        )
        return await _finish(rig, thread, "invoke_tool cycle", "refused with the cycle named")


async def invoke_chain_too_deep(tmp: Path) -> Outcome:
    names = [f"t{i}" for i in range(12)]

    def make(i: int) -> Any:
        async def run(state: Any, args: Q) -> Any:
            if i + 1 < len(names):
                return await state.invoke_tool(names[i + 1], {})
            return {"status": "success", "result": "bottom"}

        return define_tool(description=names[i], args=Q, execute=run, uses=tuple(names[i + 1 : i + 2]))

    tools = {name: make(i) for i, name in enumerate(names)}
    async with _one_call(tmp, tools, "t0", settings=RuntimeSettings(max_invoke_depth=5)) as (rig, thread, [tool]):
        assert tool.tool_status == "error" and "invoke_tool depth limit (5) reached" in (tool.content or ""), (
            tool.content
        )
        return await _finish(rig, thread, "invoke_tool chain deeper than the limit", "refused at max_invoke_depth")


SCENARIOS = [
    tool_raises,
    tool_times_out,
    tool_never_returns_until_aborted,
    tool_returns_unserialisable,
    tool_returns_10mb,
    tool_queues_itself_forever,
    invoke_cycle,
    invoke_chain_too_deep,
]
KNOWN_BUGS: dict[str, str] = {}  # scenario name -> "bugs.md N" while a bug is open (marked xfail)


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(
            s,
            id=s.__name__,
            marks=[pytest.mark.xfail(reason=KNOWN_BUGS[s.__name__], strict=True)] if s.__name__ in KNOWN_BUGS else [],
        )
        for s in SCENARIOS
    ],
)
async def test_tool_fault(scenario: Any, tmp_path: Path) -> None:
    outcome = await scenario(tmp_path)
    assert outcome.lost == 0 and outcome.duplicate_tool_runs == 0, outcome
