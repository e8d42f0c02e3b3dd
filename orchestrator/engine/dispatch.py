"""Running the tool calls of one step.

Each call becomes exactly one result the model can read: bad JSON, invalid
arguments, an unknown tool, a missing variable, an exception, a timeout or a
bad return value are all error results, never a crash. Independent calls run
concurrently; each result is stored, in its own transaction, as soon as its
call completes (not behind a slower call made before it), so a call whose
result was stored is never run again after a crash. The model still reads
the results in call order (views pair them with their calls by id).

A tool a call queues (`queue_tool`) runs after the step's calls; the queue
is stored with the calling tool's result and each queued call is stored before
it runs, so `Dispatcher.resume` goes on with a queue a crash interrupted.

Each call has an idempotency key (`ThreadState.idempotency_key`), derived
from the thread and the call id, so it is the same when a call interrupted by
a crash runs again after resume: the way for a tool to make its side effect
happen once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator.core import tracing
from orchestrator.core.event_payloads import InvokedCallPayload, Publish
from orchestrator.core.messages import Message, SideName, ToolCall, new_id
from orchestrator.core.mime import mime_problem
from orchestrator.core.results import AttachmentRef, ToolAttachment, ToolResult
from orchestrator.core.validation import describe
from orchestrator.core.waiting import Decision, WaitingCall
from orchestrator.definitions.define import AgentDefinition, PromptDefinition, ToolDefinition
from orchestrator.definitions.schema import drop_null_defaults
from orchestrator.definitions.thread_state import ToolUseError
from orchestrator.engine.state import ThreadState, ToolCallContext, bind_call
from orchestrator.engine.tool_results import as_text, coerce_result, decode_attachment, failed
from orchestrator.engine.toolset import Callable_
from orchestrator.engine.waiting import CallPauses, CallWaits, approval_needed, decided_result
from orchestrator.storage.env import EnvNotFoundError
from providers import model_json

if TYPE_CHECKING:
    from orchestrator.engine.services import Services

_T = TypeVar("_T")

NestedTarget = PromptDefinition | AgentDefinition
# (target, args, call, depth, the calling state: its prompt path is the nested call's parent)
NestedRunner = Callable[[NestedTarget, dict[str, Any], ToolCall, int, ThreadState], Awaitable[ToolResult]]


_Queue = list[tuple[str, dict[str, Any]]]  # the tools a call queued: (name, arguments), run in order


def _queued(result: Message) -> _Queue:
    """The tools a call queued, as its stored result keeps them."""
    return [(name, args) for name, args in result.metadata.get("queued", [])]


class Aborted(Exception):
    """The execution was stopped while tools ran; nothing more is stored."""


@dataclass
class StepTools:
    """What one step's dispatch needs to know."""

    state: ThreadState
    side: SideName
    depth: int
    callables: dict[str, Callable_]
    provider_tools: set[str]
    run_nested: NestedRunner


class Dispatcher:
    def __init__(self, services: Services, step: StepTools) -> None:
        self._services = services
        self._settings = services.settings
        self._step = step
        self._queued_runs = 0
        self._records: dict[str, list[WaitingCall]] = {}  # the waiting records of the calls resumed, by call id
        self.waiting: list[WaitingCall] = []  # the step's calls left waiting (engine/waiting.py)

    # -- the step's calls --------------------------------------------------
    async def run_calls(self, calls: list[ToolCall]) -> list[Message]:
        """Run local calls concurrently, storing each result as its call completes;
        then the tools they queued, in call order. Returns what was stored, in call order."""
        local = [c for c in calls if not c.provider_executed]
        tasks = {asyncio.create_task(self._run_call(c, depth=0)): i for i, c in enumerate(local)}
        results: dict[int, tuple[Message, list[tuple[str, dict[str, Any]]]]] = {}
        try:
            running = set(tasks)
            while running:
                done = await self._wait_or_abort(running)
                running -= done
                finished = sorted(done, key=tasks.__getitem__)  # finished together: in call order, one commit
                await self._wait_on([e for t in finished if isinstance(e := t.exception(), CallWaits)])
                ran = [t for t in finished if not isinstance(t.exception(), CallWaits)]
                stored = await self._store_results([(local[tasks[t]], *t.result()) for t in ran]) if ran else []
                for task, message in zip(ran, stored, strict=True):
                    results[tasks[task]] = (message, task.result()[1])
        finally:
            for task in tasks:
                task.cancel()
        stored = [results[i][0] for i in range(len(local)) if i in results]
        for i, call in enumerate(local):
            if i in results:
                stored.extend(await self._queue_or_wait(self._run_queue(call, results[i][1])))
        return stored

    async def _queue_or_wait(self, running: Awaitable[list[Message]]) -> list[Message]:
        """A queue's run; a queued call that waits (it needs approval) ends it here, and the resume
        goes on with it (`_resume_queue`: it was announced and has no result)."""
        try:
            return await running
        except CallWaits as waits:
            await self._wait_on([waits])
            return []

    async def _wait_on(self, waits: list[CallWaits]) -> None:
        """Calls that wait: the new records stored and announced, each call left without a result."""
        new = [w.record for w in waits if w.new]
        if new:
            await self._services.storage.add_waiting_calls(new)
            execution = self._step.state.execution
            publish = self._services.bus.publisher(
                self._step.state.thread_id, lease=execution.lease_token if execution else None
            )
            for record in new:
                _announce_request(publish, record)
        self.waiting.extend(w.record for w in waits)

    def _pauses(self, call: ToolCall) -> CallPauses | None:
        """The call's pauses against its stored records; None inside a prompt called as a tool, whose
        nested loop cannot rest and be resumed in the middle (its calls cannot wait)."""
        if self._step.depth > 0:
            return None
        state = self._step.state
        return CallPauses(state.thread_id, call, self._step.side, self._services.clock, self._records.get(call.id, []))

    async def store_decided(self, calls: list[ToolCall], decision: Decision) -> list[Message]:
        """Results for calls that will not run (a stopped thread's waiting calls), from their decision."""
        failed = ToolResult.fail("The call did not run")
        return await self._store_results([(c, decided_result(c.name, decision) or failed, []) for c in calls])

    async def _await_or_abort(self, task: asyncio.Task[_T]) -> _T:
        await self._wait_or_abort({task})
        return task.result()

    async def _wait_or_abort(self, tasks: set[asyncio.Task[_T]]) -> set[asyncio.Task[_T]]:
        """The tasks done first (at least one); on abort, cancel them all and raise Aborted."""
        execution = self._step.state.execution
        if execution is None:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            return done
        waiter: asyncio.Task[Any] = asyncio.create_task(execution.abort_signal.wait())
        try:
            done, _ = await asyncio.wait({*tasks, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if execution.abort_signal.aborted:
            for task in tasks:
                task.cancel()
            raise Aborted(execution.abort_signal.reason or "aborted")
        done.discard(waiter)
        return done

    async def resume(self, calls: list[ToolCall]) -> list[Message]:
        """After a crash, the last stored step's `calls`: those without a stored result run (again),
        and the tools that answered ones queued go on where the crash left them (a queued tool whose
        result was not stored runs again, with the same id and key)."""
        history = self._step.state.execution.message_history if self._step.state.execution else []
        results = {m.tool_call_id: m for m in history if m.role == "tool"}
        for record in await self._services.storage.waiting_calls(self._step.state.thread_id):
            self._records.setdefault(record.call_id, []).append(record)
        stored = await self.run_calls([c for c in calls if c.id not in results])
        for call in calls:
            if call.id in results:
                stored.extend(await self._queue_or_wait(self._resume_queue(call, results, history)))
        return stored

    async def _resume_queue(
        self, parent: ToolCall, results: dict[str | None, Message], history: list[Message]
    ) -> list[Message]:
        queue = _queued(results[parent.id])
        announces = [m.tool_calls[0] for m in history if m.metadata.get("queued_by") == parent.id and m.tool_calls]
        self._queued_runs += sum(call.id in results for call in announces)  # runs that finished count to the limit
        stored: list[Message] = []
        for call in announces:  # as `_run_queue` ran them: first in, first out
            if queue:
                queue.pop(0)
            if call.id in results:
                queue.extend(_queued(results[call.id]))
            else:  # it was running
                stored.append(await self._run_queued(call, queue))
        stored.extend(await self._run_queue(parent, queue, count=len(announces)))
        return stored

    async def _run_queue(self, parent: ToolCall, queue: _Queue, count: int = 0) -> list[Message]:
        """The tools `parent` queued, one at a time; each is announced (stored as a call of its own)
        before it runs, as a step's calls are, so a crash in it resumes it like any call."""
        stored: list[Message] = []
        while queue:
            name, args = queue.pop(0)
            count += 1  # ids derive from the parent's, so a replayed run sends the same request
            call = ToolCall(id=f"{parent.id}_queued_{count}", name=name, arguments=json.dumps(args))
            announce = Message(
                thread_id=self._step.state.thread_id,
                side=self._step.side,
                role="assistant",
                tool_calls=[call],
                depth=self._step.depth,
                metadata={"queued_by": parent.id},
                flow_id=self._flow_id(),
            )
            stored.append(await self._services.store_message(self._step.state, announce))
            stored.append(await self._run_queued(call, queue))
        return stored

    async def _run_queued(self, call: ToolCall, queue: _Queue) -> Message:
        """Run one queued call and store its result; what it queues joins the end of `queue`."""
        limit = self._settings.max_queued_tools
        more: _Queue = []
        if self._queued_runs >= limit:
            result = ToolResult.fail(
                f"queue limit reached: at most {limit} queued tools run per step; {call.name!r} was not run"
            )
        else:
            self._queued_runs += 1
            result, more = await self._await_or_abort(asyncio.create_task(self._run_call(call, depth=0, queued=True)))
        queue.extend(more)
        [stored] = await self._store_results([(call, result, more)])
        return stored

    # -- one call ----------------------------------------------------------
    async def _run_call(
        self, call: ToolCall, *, depth: int, chain: tuple[str, ...] = (), queued: bool = False
    ) -> tuple[ToolResult, list[tuple[str, dict[str, Any]]]]:
        # A queued tool was allowed by its caller's `uses`, not by the prompt's tools.
        target = self._services.definitions.tools.get(call.name) if queued else self._step.callables.get(call.name)
        if target is None:
            known = ", ".join(sorted(self._step.callables)) or "none"
            return ToolResult.fail(f"Unknown tool {call.name!r}. Available tools: {known}."), []
        args, error = _parse_arguments(call, target.args)
        if error is not None:
            return error, []
        pauses = self._pauses(call)
        args, refused = await self._gate(target, call.name, args, pauses)
        if refused is not None:
            return refused, []
        if isinstance(target, (PromptDefinition, AgentDefinition)):
            return await self._step.run_nested(target, _as_dict(args), call, self._step.depth, self._step.state), []
        ran: tuple[ToolResult, list[tuple[str, dict[str, Any]]]] = await self._execute(
            target, call, args, chain, pauses
        )
        return ran

    async def _gate(
        self, target: Callable_, name: str, args: BaseModel | dict[str, Any] | None, pauses: CallPauses | None
    ) -> tuple[BaseModel | dict[str, Any] | None, ToolResult | None]:
        """The approval a call of `target` waits for, if it needs one: raises CallWaits until decided; then
        the arguments to run with (the approver's edit) or the rejection as the call's result."""
        first = pauses.records[pauses.cursor] if pauses and pauses.cursor < len(pauses.records) else None
        asked_before = first is not None and first.kind == "approval" and first.tool == name
        if not asked_before and not await approval_needed(target, self._step.state, args):
            return args, None
        if pauses is None:
            return args, ToolResult.fail(
                f"{name!r} needs approval, which a call inside a prompt called as a tool cannot wait for"
            )
        timeout = getattr(target, "approval_timeout", None) or self._settings.approval_timeout
        decision = pauses.reach("approval", tool=name, arguments=_as_dict(args), timeout=timeout)
        refused = decided_result(name, decision)
        if refused is not None or decision.arguments is None:
            return args, refused
        model = getattr(target, "args", None)
        return (model.model_validate(decision.arguments) if model is not None else decision.arguments), None

    @tracing.tool_call
    async def _execute(
        self,
        tool: ToolDefinition,
        call: ToolCall,
        args: BaseModel | dict[str, Any] | None,
        chain: tuple[str, ...],
        pauses: CallPauses | None = None,
    ) -> tuple[ToolResult, list[tuple[str, dict[str, Any]]]]:
        missing = await self._missing_variable(tool)
        if missing is not None:
            return missing, []
        submitted = pauses.submitted() if pauses is not None else None  # a deferred call's result: not run again
        if submitted is not None:
            return decided_result(call.name, submitted) or ToolResult.fail("no result"), []
        context = ToolCallContext(
            tool=tool,
            call_id=call.id,
            invoke=self._invoke,
            chain=chain + (tool.name or call.name,),
            idempotency_key=f"{self._step.state.thread_id}:{call.id}",
            pauses=pauses,
        )
        state = bind_call(self._step.state, context)
        timeout = tool.timeout or self._settings.tool_timeout
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                if tool.args is None:
                    raw = await tool.execute(state)
                else:
                    raw = await tool.execute(state, args)
        except TimeoutError as exc:
            if not deadline.expired():  # the tool's own TimeoutError (an upstream call of its own), not our limit
                return failed(call.name, exc), []
            return ToolResult.fail(f"Tool {call.name!r} timed out after {timeout:g} s"), []
        except CallWaits:
            raise
        except ToolUseError as exc:
            return ToolResult.fail(str(exc)), []
        except Exception as exc:
            return failed(call.name, exc), []
        if pauses is not None and pauses.waiting is not None:  # the tool caught its own `ask`: it still waits
            raise pauses.waiting
        if tool.deferred or (isinstance(raw, ToolResult) and raw.is_deferred):
            if pauses is None:
                return ToolResult.fail(f"{call.name!r} deferred its result, which a nested call cannot wait for"), []
            pauses.reach("result", arguments=_as_dict(args))  # raises: the call waits for its result
        result = as_text(call.name, coerce_result(call.name, raw))  # before its attachments' names are stored
        result = await self._store_attachments(call.name, result)
        return self._truncate(result), context.queue

    async def _invoke(self, name: str, args: dict[str, Any], parent: ToolCallContext) -> ToolResult:
        """`state.invoke_tool`: run now, with `tool_invoked` / `tool_invoked_result` events
        (under the calling tool's id) so the page and the CLI show the nested call."""
        parent.invocations += 1  # ids derive from the caller's: the same on a run again after resume
        call_id = f"{parent.call_id}_invoked_{parent.invocations}"
        where: InvokedCallPayload = {
            "id": call_id,
            "parent_id": parent.call_id,
            "name": name,
            "side": self._step.side,
            "depth": self._step.depth,
        }
        execution = self._step.state.execution
        lease = execution.lease_token if execution else None
        publish = self._services.bus.publisher(self._step.state.thread_id, lease=lease)
        publish("tool_invoked", {**where, "arguments": args})
        try:
            result = as_text(name, await self._invoke_now(call_id, name, args, parent))
        except CallWaits:  # the invoked tool waits for approval: so does the calling tool's call
            raise
        except Exception as exc:  # a refused call (cycle, depth, uses) reaches the calling tool as before
            publish("tool_invoked_result", {**where, "tool_status": "error", "content": f"{type(exc).__name__}: {exc}"})
            raise
        content = result.result if result.status == "success" else result.error
        publish("tool_invoked_result", {**where, "tool_status": result.status, "content": content or ""})
        return result

    async def _invoke_now(self, call_id: str, name: str, args: dict[str, Any], parent: ToolCallContext) -> ToolResult:
        if name in parent.chain:
            raise ToolUseError(f"invoke_tool cycle: {' -> '.join(parent.chain + (name,))}")
        if len(parent.chain) >= self._settings.max_invoke_depth:
            raise ToolUseError(
                f"invoke_tool depth limit ({self._settings.max_invoke_depth}) reached: "
                f"{' -> '.join(parent.chain + (name,))}"
            )
        target = self._services.definitions.resolve_callable(name)
        call = ToolCall(id=call_id, name=name, arguments=json.dumps(args))
        parsed, error = _parse_arguments(call, target.args)
        if error is not None:
            return error
        parsed, refused = await self._gate(target, name, parsed, parent.pauses)  # the calling call waits for it
        if refused is not None:
            return refused
        if not isinstance(target, ToolDefinition):
            return await self._step.run_nested(target, _as_dict(parsed), call, self._step.depth, self._step.state)
        ran: tuple[ToolResult, list[tuple[str, dict[str, Any]]]] = await self._execute(
            target, call, parsed, parent.chain
        )
        parent.queue.extend(ran[1])
        return ran[0]

    async def _missing_variable(self, tool: ToolDefinition) -> ToolResult | None:
        for variable in tool.variables:
            if not variable.required:
                continue
            try:
                await self._step.state.env(variable.name)
            except EnvNotFoundError:
                return ToolResult.fail(
                    f"Tool {tool.name!r} needs env value {variable.name!r}"
                    f"{f' ({variable.description})' if variable.description else ''}, which is not set"
                )
        return None

    # -- results -----------------------------------------------------------
    async def _store_attachments(self, name: str, result: ToolResult) -> ToolResult:
        if not result.attachments:
            return result
        decoded: list[tuple[ToolAttachment, bytes]] = []
        for item in result.attachments:
            if (problem := mime_problem(item.mime_type)) is not None:  # it becomes a header when downloaded
                return ToolResult.fail(f"Tool {name!r} returned a bad attachment {item.name!r}: {problem}")
            if isinstance(item, ToolAttachment):
                problem, data = decode_attachment(item, self._settings.max_attachment_bytes)
                if problem:
                    return ToolResult.fail(f"Tool {name!r} returned a bad attachment {item.name!r}: {problem}")
                decoded.append((item, data))
        refs: list[ToolAttachment | AttachmentRef] = [a for a in result.attachments if isinstance(a, AttachmentRef)]
        for item, data in decoded:
            ref = AttachmentRef(
                id=new_id("file"),
                name=item.name,
                mime_type=item.mime_type,
                size=len(data),
                width=item.width,
                height=item.height,
            )
            refs.append(await self._services.storage.put_file(self._step.state.thread_id, ref, data))
        return result.model_copy(update={"attachments": refs})

    def _truncate(self, result: ToolResult) -> ToolResult:
        limit = self._settings.max_tool_result_chars
        text = result.result
        if text is None or len(text) <= limit:
            return result
        note = f"\n[result truncated: {len(text)} characters, showing the first {limit}]"
        return result.model_copy(update={"result": text[:limit] + note})

    async def _store_results(self, done: list[tuple[ToolCall, ToolResult, _Queue]]) -> list[Message]:
        """`done`: calls, their results and the tools they queued (kept with the result: after a crash
        the queue goes on from there)."""
        hooks, state = self._services.hooks, self._step.state
        ready = [
            (call, as_text(call.name, await hooks.transform("before_store_tool_result", state, result, call)), queue)
            for call, result, queue in done
        ]
        messages = [self._result_message(call, result, queue) for call, result, queue in ready]
        stored = await self._services.store_messages(state, messages, event="tool_result")
        for call, result, _ in ready:
            success = result.status == "success"
            await hooks.call("after_tool_call_success" if success else "after_tool_call_failure", state, call, result)
        return stored

    def _result_message(self, call: ToolCall, result: ToolResult, queue: _Queue) -> Message:
        state = self._step.state
        redact = self._services.redactor.for_thread(state.thread_id).text
        content = result.result if result.status == "success" else (result.error or "Tool failed")
        return Message(
            thread_id=state.thread_id,
            side=self._step.side,
            role="tool",
            tool_call_id=call.id,
            name=call.name,
            content=redact(content or ""),
            tool_status=result.status,
            depth=self._step.depth,
            flow_id=self._flow_id(),
            attachments=[a for a in result.attachments or [] if isinstance(a, AttachmentRef)],
            metadata={
                **({"stack": redact(result.stack)} if result.stack else {}),
                **({"queued": [[name, args] for name, args in queue]} if queue else {}),
            },
        )

    def _flow_id(self) -> str | None:
        execution = self._step.state.execution
        return execution.flow_id if execution else None


def _announce_request(publish: Publish, r: WaitingCall) -> None:
    """The event that says a call waits: `approval_requested`, `result_requested` or `question_asked`."""
    if r.kind == "approval":
        publish(
            "approval_requested",
            {
                "call_id": r.call_id,
                "tool": r.tool,
                "arguments": r.arguments,
                "side": r.side,
                "expires_at": r.expires_at,
            },
        )
    elif r.kind == "result":
        publish("result_requested", {"call_id": r.call_id, "tool": r.tool, "arguments": r.arguments, "side": r.side})
    else:
        publish(
            "question_asked",
            {"call_id": r.call_id, "tool": r.tool, "position": r.position, "payload": r.payload, "side": r.side},
        )


def _parse_arguments(
    call: ToolCall, model: type[BaseModel] | None
) -> tuple[BaseModel | dict[str, Any] | None, ToolResult | None]:
    """The call's arguments, validated: a model instance, a plain dict without
    a model, or an error result the model can read and correct."""
    text = (call.arguments or "").strip() or "{}"
    try:
        args = model_json.loads(text)
    except model_json.TooDeep as exc:
        return None, ToolResult.fail(f"The arguments of {call.name!r} {exc}: send them with less nesting.")
    except json.JSONDecodeError as exc:
        return None, ToolResult.fail(
            f"Invalid JSON in the arguments of {call.name!r}: {exc.msg} at position {exc.pos}. Send one JSON object."
        )
    if not isinstance(args, dict):
        return None, ToolResult.fail(
            f"The arguments of {call.name!r} must be a JSON object, got {type(args).__name__}."
        )
    if model is None:
        return args, None
    try:
        return model.model_validate(drop_null_defaults(model, args)), None
    except ValidationError as exc:
        problems = describe(exc)
        return None, ToolResult.fail(f"Invalid arguments for {call.name!r}: {problems}")


def _as_dict(args: BaseModel | dict[str, Any] | None) -> dict[str, Any]:
    if isinstance(args, BaseModel):
        return args.model_dump(mode="json")
    return args or {}
