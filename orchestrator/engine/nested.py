"""Prompts and agents called as tools.

A prompt as a tool runs a nested model loop one level deeper (`prompt_path`
grows; its messages are stored with `depth + 1`) and returns its final text.
An agent as a tool runs a child thread whose creation arguments are the call's
arguments, and returns the child's final answer.

A nested loop runs inside its caller's execution (its counters, stream, events
and dispatch): `NestedHost` is what it uses of it, and all it may use. Its steps
are the execution's own `answer`, so its requests pass the same hooks
(`prefilter_llm_history`), carry the same attachments and are announced and
logged as a side's are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.core import tracing
from orchestrator.core.messages import Message, SideName, ThreadRecord, ToolCall
from orchestrator.core.results import ToolResult
from orchestrator.definitions.define import AgentDefinition, PromptDefinition
from orchestrator.engine import typed_output
from orchestrator.engine.state import in_prompt
from orchestrator.storage.base import ThreadBusyError

if TYPE_CHECKING:
    from orchestrator.engine.executor import Executed
    from orchestrator.engine.services import Services
    from orchestrator.engine.state import ThreadState
    from orchestrator.engine.toolset import Toolset
    from providers.stream import ModelInfo


class NestedHost(Protocol):
    """The execution a nested call runs in (`executor._Execution` is the one)."""

    @property
    def services(self) -> Services: ...

    @property
    def thread(self) -> ThreadRecord: ...

    @property
    def state(self) -> ThreadState: ...

    @property
    def flow_id(self) -> str: ...

    async def toolset(self, prompt: PromptDefinition) -> tuple[ModelInfo, Toolset]:
        """The prompt's model and tools."""

    async def answer(
        self,
        side: SideName,
        prompt: PromptDefinition,
        state: ThreadState,
        history: list[Message],
        *,
        depth: int = 0,
        arguments: Mapping[str, Any] | None = None,
        parent_call: str | None = None,
    ) -> Message:
        """One model request and its answer, stored and counted as the execution's step."""

    async def dispatch(
        self,
        side: SideName,
        toolset: Toolset,
        calls: list[ToolCall],
        depth: int,
        state: ThreadState | None = None,
        *,
        resumed: bool = False,
    ) -> list[Message]:
        """Run a step's tool calls (`resumed`: a stored step's, after a crash); returns what was stored."""


def opening_text(args: dict[str, Any]) -> str:
    """The person's first message to an ai_human agent called as a tool (here or by `mcp-serve`): its
    `message` argument alone, else the arguments as JSON."""
    message = args.get("message")
    return message if isinstance(message, str) and len(args) == 1 else json.dumps(args)


@tracing.tool_call
async def run_nested(
    run: NestedHost,
    target: PromptDefinition | AgentDefinition,
    args: dict[str, Any],
    call: ToolCall,
    side: SideName,
    depth: int,
    caller: ThreadState,
) -> ToolResult:
    limit = run.services.settings.max_invoke_depth
    if depth + 1 > limit:
        return ToolResult.fail(f"nesting limit ({limit}) reached: {call.name!r} was not run")
    if isinstance(target, AgentDefinition):
        return await _run_agent(run, target, args, call, depth)
    return await _run_prompt(run, target, args, call, side, depth, caller)


async def _run_prompt(
    run: NestedHost,
    prompt: PromptDefinition,
    args: dict[str, Any],
    call: ToolCall,
    side: SideName,
    depth: int,
    caller: ThreadState,
) -> ToolResult:
    inner = depth + 1
    state = in_prompt(caller, prompt.name or call.name)  # its own path: parallel calls never share a top
    _, toolset = await run.toolset(prompt)
    local = _stored_run(caller, call.id, inner)
    if local:  # a resumed execution: the loop goes on from its last stored step
        last = next(m for m in reversed(local) if "parent_call" in m.metadata)  # the opening or the last step
        if last.role == "assistant" and not last.tool_calls:
            return typed_output.tool_result(last)  # it had answered; the caller's result was not stored
        calls = list(last.tool_calls or ())
        local.extend(await run.dispatch(side, toolset, calls, depth=inner, state=state, resumed=True))
    else:
        opening = Message(
            thread_id=run.thread.id,
            side=side,
            role="user",
            content=opening_text(args),
            depth=inner,
            flow_id=run.flow_id,
            metadata={"parent_call": call.id, "prompt": prompt.name},
        )
        local = [await run.services.store_message(state, opening)]
    for _ in range(prompt.max_steps - sum(m.role == "assistant" and "parent_call" in m.metadata for m in local)):
        assistant = await run.answer(side, prompt, state, local, depth=inner, arguments=args, parent_call=call.id)
        local.append(assistant)
        if not assistant.tool_calls and prompt.output_spec is not None:
            settled = await _settled(run, prompt, state, local, assistant, arguments=args, parent_call=call.id)
            if isinstance(settled, ToolResult):
                return settled
            assistant = settled
        if not assistant.tool_calls:
            return typed_output.tool_result(assistant)
        local.extend(await run.dispatch(side, toolset, assistant.tool_calls, depth=inner, state=state))
    return ToolResult.fail(f"prompt {prompt.name!r} did not finish within {prompt.max_steps} steps")


async def _settled(
    run: NestedHost,
    prompt: PromptDefinition,
    state: ThreadState,
    local: list[Message],
    answer: Message,
    *,
    arguments: dict[str, Any],
    parent_call: str,
) -> Message | ToolResult:
    """A typed prompt's answer once valid (`typed_output.settle`, its corrections kept in the nested loop's
    history), or the failure as the caller's tool result: the calling model can try another way."""
    side, depth = answer.side or "a", answer.depth

    async def again() -> Message:
        message = await run.answer(
            side, prompt, state, local, depth=depth, arguments=arguments, parent_call=parent_call
        )
        local.append(message)
        return message

    async def store(message: Message) -> None:
        local.append(await run.services.store_message(state, message))

    try:
        return await typed_output.settle(prompt, answer, again=again, store=store)
    except typed_output.OutputProblem as exc:
        return ToolResult.fail(str(exc))


def _stored_run(caller: ThreadState, call_id: str, depth: int) -> list[Message]:
    """The messages a crashed execution stored for the nested loop of `call_id`: its opening and steps
    (marked with the call), their tool results and the tools they queued, in the order stored."""
    history = caller.execution.message_history if caller.execution is not None else []
    owned: set[str] = set()  # the loop's tool call ids
    stored = []
    for m in history:
        if m.depth != depth:
            continue
        if (
            m.metadata.get("parent_call") == call_id
            or m.metadata.get("queued_by") in owned
            or (m.role == "tool" and m.tool_call_id in owned)
        ):
            stored.append(m)
            owned.update(c.id for c in m.tool_calls or ())
    return stored


async def _run_agent(
    run: NestedHost, agent: AgentDefinition, args: dict[str, Any], call: ToolCall, depth: int
) -> ToolResult:
    from orchestrator.engine.executor import ExecutionFailed, execute

    services = run.services
    child = await _child(run, call)
    if child is None:
        child = await services.storage.create_thread(
            ThreadRecord(
                id=_child_id(run.thread.id, call.id),
                agent_id=agent.name or call.name,
                user_id=run.thread.user_id,
                arguments=args,
                parent_id=run.thread.id,
                depth=run.thread.depth + 1,
            )
        )
        lease = run.state.execution.lease_token if run.state.execution is not None else None
        started = services.bus.publisher(run.thread.id, lease=lease)
        started("subagent_started", {"thread_id": child.id, "agent": child.agent_id, "call_id": call.id})
    elif child.execution is not None and child.status == "failed":
        return ToolResult.fail(f"agent {child.agent_id!r} failed")
    elif child.execution is not None and child.status != "running":  # it finished; the caller's result was lost
        return ToolResult.ok(await _final_answer(services, child.id))
    fresh = child.execution is None  # else the child's crashed execution, resumed
    try:
        message = opening_text(args) if fresh and agent.type == "ai_human" else None
        done = await (execute(services, child, person_message=message) if fresh else _resume_child(services, child))
    except ExecutionFailed as exc:
        return ToolResult.fail(f"agent {child.agent_id!r} failed: {exc}")
    return ToolResult.ok((done.result.output if fresh else await _final_answer(services, child.id)) or "")


async def _resume_child(services: Services, child: ThreadRecord) -> Executed:
    """Resume a child a crashed execution left running. Its lease was taken after its parent's, so it
    may still be held when the parent resumes: wait it out (on the lease clock, `Heartbeat.sleep`), for
    at most one lease TTL in all, as a second worker waits out the parent's. A child still held after
    that runs elsewhere: the `ThreadBusyError` ends the parent's execution, which stays resumable."""
    from orchestrator.engine.executor import execute

    budget = services.settings.lease_ttl
    while True:
        try:
            return await execute(services, child)
        except ThreadBusyError as exc:
            wait = exc.expires_in
            if wait is None or wait > budget:
                raise
            budget -= wait
            await services.heartbeat.sleep(wait)


async def _child(run: NestedHost, call: ToolCall) -> ThreadRecord | None:
    """The child thread an earlier, crashed execution of this call created, if any."""
    from orchestrator.storage import NotFoundError

    try:
        return await run.services.storage.get_thread(_child_id(run.thread.id, call.id))
    except NotFoundError:
        return None


def _child_id(parent_id: str, call_id: str) -> str:
    """One child thread per call, whichever execution runs the call: a resumed one finds the child."""
    return "thr_" + hashlib.sha256(f"{parent_id}/{call_id}".encode()).hexdigest()[:32]


async def _final_answer(services: Services, thread_id: str) -> str:
    """The child's last answer with text, as its one uninterrupted execution would have returned it."""
    messages = (await services.storage.get_messages(thread_id, order="desc", max_depth=0)).messages
    return next((m.content for m in messages if m.role == "assistant" and m.content), "")
