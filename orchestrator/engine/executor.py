"""The two-sided loop: an execution is turns, a turn is steps, a step is one
model request and the tool calls it asked for.

Read top to bottom: `execute` takes the thread's lease and runs `_Execution.run`,
which alternates sides' turns until something ends the execution; `turn` runs
one side's steps until its turn ends; `step` is one `answer` (a model request,
streamed, stored in one transaction) and the tool calls it asked for.

`answer` is the one place a model request is made (`answer_stream.read` reads
its stream): a prompt called as a tool takes its nested loop's steps through it
too, so both see the same hooks, attachments, events, counters and log. `toolset`, `answer` and `dispatch` are
the public face that nested loop runs through (`nested.NestedHost`); the rest
of `_Execution` is the loop's own. The execution's state changes only through
the snapshot's transitions (`ExecutionSnapshot.end`, `advance_turn`, ...).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from orchestrator.core import tracing
from orchestrator.core.event_payloads import TurnEndReason
from orchestrator.core.execution_result import ExecutionFailed, ExecutionResult, OutputFailed, any_result
from orchestrator.core.messages import (
    ExecutionSnapshot,
    Message,
    SideName,
    ThreadRecord,
    ThreadStatus,
    ToolCall,
    Usage,
    new_id,
)
from orchestrator.core.results import ToolResult
from orchestrator.core.waiting import Decision, WaitingCallError, WaitingKind, awaiting_reason
from orchestrator.definitions.define import AgentDefinition, PromptDefinition, Side, ToolDefinition
from orchestrator.definitions.thread_state import ExecutionState
from orchestrator.engine import answer_stream, gc_policy, typed_output
from orchestrator.engine.answers import provider_family
from orchestrator.engine.client_tools import with_client_tools
from orchestrator.engine.dispatch import Aborted, Dispatcher, NestedTarget, StepTools
from orchestrator.engine.resume import logged_turn_events, resumed_step
from orchestrator.engine.state import ThreadState
from orchestrator.engine.toolset import Toolset, build_toolset
from orchestrator.engine.views import render_prompt, side_view
from orchestrator.engine.waiting import CallsWaiting, NotWaitingError
from orchestrator.storage.base import StaleLeaseError
from providers.stream import ModelInfo, ProviderError, StreamEnd

if TYPE_CHECKING:
    from orchestrator.engine.services import Services

_log = structlog.get_logger("orchestrator.engine.executor")

__all__ = ["Executed", "ExecutionFailed", "ExecutionResult", "execute"]  # the results are re-exported from here


@dataclass
class _Outcome:
    called: set[str]


@dataclass(frozen=True, slots=True)
class Executed:
    """What `execute` hands back: the result, and the thread record as the execution's last commit
    stored it, so the caller need not read it back (a storage round trip per execution)."""

    result: ExecutionResult
    thread: ThreadRecord


async def execute(
    services: Services,
    thread: ThreadRecord,
    *,
    person_message: str | None = None,
    on_start: Callable[[ThreadState, ThreadRecord], None] | None = None,
    resume_waiting: bool = False,
    stop_waiting: str | None = None,
    client_tools: Sequence[ToolDefinition] = (),
) -> Executed:
    """Run one execution of `thread` under its lease (one execution per thread).

    `on_start(state, record)` runs once the execution holds the lease, before it writes anything;
    `record` is the thread as storage gave it, which the execution keeps current from then on.
    `resume_waiting`: go on with a thread whose waiting calls are decided (engine/waiting.py);
    `stop_waiting`: end a waiting thread instead, its waiting calls answered as stopped. Either raises
    NotWaitingError when the thread is not waiting (any more); any other start of a waiting thread
    is refused (WaitingCallError): its calls are decided first. `client_tools`: this run's tools of the
    client's, offered to the agent's sides beside their own (engine/client_tools.py)."""
    agent = services.definitions.agents[thread.agent_id]
    owner = f"{services.owner}/{new_id('exec')[-8:]}"  # per execution: a second one in this process is refused too
    start = await services.storage.begin_execution(thread.id, owner, services.settings.lease_ttl)
    keeper = services.heartbeat.keep(start.lease, services.settings.lease_ttl)
    token = start.lease.token
    held = services.settings.gc_defer_full
    if held:
        gc_policy.hold_full_collections()
    try:
        services.bus.fence(thread.id, token)  # also keeps the channel attached until we are done
        last_event = start.last_event_seq  # None from a store that did not read it with the lease
        if last_event is None:
            last_event = await services.storage.last_event_seq(thread.id)
        await services.bus.attach(thread.id, stored=last_event)  # another process may have run it since
        thread = start.thread
        _check_waiting(thread, resume_waiting or stop_waiting is not None)
        execution = ExecutionState(_snapshot_for(thread), start.history)
        execution.lease_token = token
        del start  # not held for the execution's length: its history is the execution's now
        keeper.on_lost(execution.lose_lease)
        state = ThreadState(services, thread, agent, execution=execution)
        if on_start is not None:
            on_start(state, thread)
        run = _Execution(services, thread, agent, state, execution, log_end=last_event)
        run.stop_waiting = stop_waiting
        run.client_tools = tuple(client_tools)
        result: ExecutionResult = await run.run(person_message)
        return Executed(result, thread)
    finally:
        if held:  # first, before anything here can be cancelled
            gc_policy.release_full_collections()
        await services.heartbeat.release(keeper)
        with contextlib.suppress(Exception):
            await services.bus.flush(thread.id)
        services.bus.unfence(thread.id, token)
        services.bus.detach(thread.id)  # unless someone is watching: nothing of it need stay in memory
        with contextlib.suppress(Exception):
            await services.storage.release_lease(keeper.lease)


async def _no_nested(*_: object) -> ToolResult:
    raise RuntimeError("no nested call runs while a waiting thread is stopped")


def _check_waiting(thread: ThreadRecord, resume: bool) -> None:
    if resume and thread.status not in ("waiting", "running"):  # running: a resume that crashed, taken up again
        raise NotWaitingError(f"thread {thread.id} is not waiting (it is {thread.status})")
    if not resume and thread.status == "waiting":
        raise WaitingCallError(
            f"thread {thread.id} is waiting for decisions on tool calls (thread.waiting_calls()); "
            "approve, reject, submit_result or answer them, or stop() the thread"
        )


def _snapshot_for(thread: ThreadRecord) -> ExecutionSnapshot:
    previous = thread.execution
    if thread.status in ("running", "waiting") and previous is not None:  # crashed or waiting: go on with it
        return previous.resumed()
    return ExecutionSnapshot.following(previous, new_id("flow"))


class _Execution:
    # (event type, turn number) of the turn events a crashed attempt of this flow logged; set on resume
    announced: frozenset[tuple[str, int]] = frozenset()
    stop_waiting: str | None = None  # end a waiting thread: its waiting calls get "stopped" results
    client_tools: tuple[ToolDefinition, ...] = ()  # this run's client tools (engine/client_tools.py)

    def __init__(
        self,
        services: Services,
        thread: ThreadRecord,
        agent: AgentDefinition,
        state: ThreadState,
        execution: ExecutionState,
        *,
        log_end: int,
    ) -> None:
        self.services = services
        self.thread = thread
        self.agent = agent
        self.state = state
        self.execution = execution
        self.snapshot = execution.snapshot
        self.publish = services.bus.publisher(thread.id, defer=True, lease=execution.lease_token)
        self.first_seq = max((m.seq for m in execution.message_history), default=0)
        self.log_end = log_end  # the event log's last seq as the execution began: a resume reads its tail

    # -- execution: turns until something ends it ---------------------------
    @tracing.execution
    async def run(self, person_message: str | None) -> ExecutionResult:
        resuming = self.thread.status in ("running", "waiting")
        self.publish("execution_started", {"flow_id": self.snapshot.flow_id, "resumed": resuming})
        if resuming or person_message is None:
            await self._save(status="running")
        if not resuming and person_message is None:
            self.snapshot.take_forced_side()  # forced before it started
        try:
            if resuming:
                storage = self.services.storage
                self.announced = await logged_turn_events(storage, self.thread.id, self.snapshot, self.log_end)
            if self.stop_waiting is not None:
                await self._end_waiting(self.stop_waiting)
                return await self._finish()
            pending = await self._resume_pending() if resuming else None
            if person_message is not None:
                await self._person_turn(person_message, save_thread=not resuming)
            await self._turns(pending)
        except Aborted:
            pass
        except CallsWaiting as waiting:
            return await self._finish(waiting=waiting.kinds)
        except ProviderError as exc:
            if self.execution.lease_lost is None:
                return await self._fail(exc)
        except typed_output.OutputProblem as exc:
            if self.execution.lease_lost is None:
                return await self._fail_output(exc)
        if self.execution.lease_lost is not None:  # nothing more may be written: whoever takes the thread resumes it
            raise StaleLeaseError(self.execution.lease_lost)
        return await self._finish()

    async def _turns(self, pending: _Outcome | None) -> None:
        """Turns until the session ends or rests. A turn's end is stored with the next turn's first
        step (or the execution's end), not in a commit of its own: a resume after a crash in between
        finds the ended turn's last step stored and derives its end again (`_resume_pending`), all but
        a forced side, which is stored before its turn."""
        max_turns = self.agent.max_session_turns or self.services.settings.default_max_session_turns
        forced = False
        while not self.snapshot.stopped and not self.execution.abort_signal.aborted:
            if self.snapshot.turn_count >= max_turns:
                self.snapshot.end(self.snapshot.current_side, "max_session_turns")
                break
            side = self.snapshot.current_side
            if self.agent.type == "ai_human" and side == "b":
                break  # the person's turn: the thread rests until their next message
            if forced:  # a forced side is stored before its turn: a resume could not derive it
                await self._save()
            reason = await self.turn(side, resumed=pending)
            pending = None
            forced = self.snapshot.forced_side is not None
            self.snapshot.advance_turn(side, reason)  # a conversation's end or a stop ends the execution here

    async def _person_turn(self, text: str, *, save_thread: bool) -> None:
        """The person's message; with `save_thread`, in the same commit as the thread's switch to running."""
        message = Message(thread_id=self.thread.id, side="b", role="user", content=text, flow_id=self.snapshot.flow_id)
        thread = None
        if save_thread:
            self.thread.status, self.thread.execution, self.thread.updated_at = "running", self.snapshot, time.time()
            thread = self.thread
        await self.services.store_messages(self.state, [message], thread=thread)  # one coroutine fewer held
        self.snapshot.person_spoke()

    # -- turn: one side's steps -------------------------------------------
    @tracing.turn
    async def turn(self, side: SideName, resumed: _Outcome | None = None) -> TurnEndReason:
        side_def = self._side(side)
        prompt = self.services.definitions.prompts[side_def.prompt]
        self.execution.prompt_path = [prompt.name or side_def.prompt]
        max_steps = side_def.max_steps or self.services.settings.default_max_steps
        number = self.snapshot.turn_count + 1
        if resumed is None and ("turn_started", number) not in self.announced:
            self.publish("turn_started", {"side": side, "turn": number})
        outcome = resumed
        while True:
            if outcome is not None:
                reason = self._turn_end(side_def, outcome, max_steps)
                if reason is not None:
                    if ("turn_ended", number) not in self.announced:
                        self.publish("turn_ended", {"side": side, "reason": reason})
                    return reason
            outcome = await self.step(side, prompt)

    def _turn_end(self, side_def: Side, outcome: _Outcome, max_steps: int) -> TurnEndReason | None:
        if self.execution.abort_signal.aborted:
            return "stopped"
        if side_def.end_conversation_tool and side_def.end_conversation_tool in outcome.called:
            return "end_conversation"
        if side_def.stop_tool and side_def.stop_tool in outcome.called:
            return "stop_tool"
        if self.snapshot.forced_side is not None:
            return "forced"
        if not outcome.called and side_def.stop_on_response:
            return "response"
        if self.snapshot.turn_step_count >= max_steps:
            return "max_steps"
        return None

    # -- step: one model answer and its tool calls ----------------------------
    async def step(self, side: SideName, prompt: PromptDefinition) -> _Outcome:
        assistant = await self.answer(side, prompt, self.state, self.execution.message_history)
        if prompt.output_spec is not None and not assistant.tool_calls:  # a typed answer: valid, or corrected
            assistant = await typed_output.settle(
                prompt,
                assistant,
                again=lambda: self.answer(side, prompt, self.state, self.execution.message_history),
                store=self._store_one,
            )
        _, toolset = await self.toolset(prompt)
        await self.dispatch(side, toolset, assistant.tool_calls or [], depth=0)
        return _Outcome(called={c.name for c in assistant.tool_calls or []})

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
        """One model request for `side` and its answer, stored with the execution's counters; for a side's
        turn and for a prompt called as a tool (`depth` > 0, its messages marked with `parent_call`) alike.
        The request is what `side` sees of `history` (one snapshot, the images it shows attached) as the
        `prefilter_llm_history` hook leaves it; `step_started` announces it and the step is logged."""
        info, toolset = await self.toolset(prompt)
        history = list(history)  # one snapshot per request
        system = render_prompt(prompt.prompt, {**prompt.variables, **self.thread.arguments, **(arguments or {})})
        system += typed_output.system_note(prompt, info)
        attachments = await self._image_data(history) if info.supports_images else {}
        messages = side_view(
            side,
            history,
            system,
            depth=depth,
            image_input=info.supports_images,
            attachment_data=attachments,
            family=provider_family(info.model),
        )
        messages = await self.services.hooks.transform("prefilter_llm_history", state, messages)
        started = time.perf_counter()
        self.publish("step_started", {"side": side, "step": self.snapshot.step_count + 1, "model": info.alias})
        assistant, end = await answer_stream.read(self, side, prompt, info, toolset, messages, depth)
        self.snapshot.count_step(side, nested=depth > 0)
        self._add_usage(end)
        if parent_call is not None:
            assistant.metadata["parent_call"] = parent_call
        typed_output.read_answer(prompt, info, assistant)
        self.thread.execution = self.snapshot
        [stored] = await self.services.store_messages(state, [assistant], thread=self.thread)
        self._log_step(side, info, end, started)
        return stored

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
        """Run a step's calls; `state`: the nested prompt's own state (its prompt path), else the execution's.
        `resumed`: the calls of a step stored before a crash (`Dispatcher.resume`)."""
        if not calls:
            return []
        from orchestrator.engine.nested import run_nested

        async def nested(
            target: NestedTarget, args: dict[str, Any], call: ToolCall, at_depth: int, caller: ThreadState
        ) -> ToolResult:
            result: ToolResult = await run_nested(self, target, args, call, side, at_depth, caller)
            return result

        step = StepTools(state or self.state, side, depth, toolset.callables, toolset.provider_tools, nested)
        dispatcher = Dispatcher(self.services, step)
        stored = await (dispatcher.resume(calls) if resumed else dispatcher.run_calls(calls))
        if dispatcher.waiting:  # the others are stored: the execution ends here, waiting
            raise CallsWaiting({w.kind for w in dispatcher.waiting})
        return stored

    # -- resuming after a crash ---------------------------------------------
    async def _resume_pending(self) -> _Outcome | None:
        """Run the tool calls of the last stored step that have no stored result."""
        last = resumed_step(self.execution.message_history, self.snapshot.current_side)
        if last is None or last.side is None:
            return None
        prompt = self.services.definitions.prompts[self._side(last.side).prompt]
        _, toolset = await self.toolset(prompt)
        await self.dispatch(last.side, toolset, last.tool_calls or [], depth=0, resumed=True)
        return _Outcome(called={c.name for c in last.tool_calls or []})

    # -- bookkeeping -------------------------------------------------------
    def _side(self, side: SideName) -> Side:
        side_def = self.agent.side_a if side == "a" else self.agent.side_b
        if side_def is None:
            raise RuntimeError(f"agent {self.agent.name!r} has no side {side!r} (it is an ai_human agent)")
        return side_def

    @property
    def flow_id(self) -> str:
        return self.snapshot.flow_id

    def model_alias(self, prompt: PromptDefinition) -> str | None:
        return self.services.settings.model or prompt.model

    async def toolset(self, prompt: PromptDefinition) -> tuple[ModelInfo, Toolset]:
        """The prompt's model and tools; built once per runtime (schemas cost milliseconds)."""
        alias = self.model_alias(prompt)
        key = (prompt.name or "", alias)
        cache = self.services.toolsets
        if key not in cache:
            info = self.services.client.model_info(alias)
            mcp = self.services.mcp
            if mcp is not None:
                await mcp.prepare(prompt.tools)  # starts the MCP servers the prompt names, on first use
            toolset = build_toolset(prompt.tools, self.services.definitions, info.dialect, info.provider_type, mcp)
            typed_output.add_to_toolset(toolset, prompt, info)
            cache[key] = (info, toolset)
        info, toolset = cache[key]
        if self.client_tools and prompt.name in self._side_prompts():
            toolset = with_client_tools(toolset, self.client_tools, info.dialect)
        return info, toolset

    def _side_prompts(self) -> set[str | None]:
        return {side.prompt for side in (self.agent.side_a, self.agent.side_b) if side is not None}

    async def _image_data(self, history: list[Message]) -> dict[str, str]:
        import base64

        out: dict[str, str] = {}
        for message in history:
            for ref in message.attachments:
                if ref.mime_type.startswith("image/") and ref.id not in out:
                    _, data = await self.services.storage.get_file(self.thread.id, ref.id)
                    out[ref.id] = base64.b64encode(data).decode()
        return out

    def _add_usage(self, end: StreamEnd) -> None:
        u = end.usage
        self.thread.usage = self.thread.usage.add(
            Usage(input_tokens=u.input_tokens, output_tokens=u.output_tokens, cost=u.cost, requests=end.attempts)
        )

    def _log_step(self, side: SideName, info: ModelInfo, end: StreamEnd, started: float) -> None:
        _log.info(
            "step",
            thread_id=self.thread.id,
            flow_id=self.snapshot.flow_id,
            side=side,
            step=self.snapshot.step_count,
            model=end.model or info.model,
            input_tokens=end.usage.input_tokens,
            output_tokens=end.usage.output_tokens,
            cost=end.usage.cost,
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
        )

    async def _save(self, status: ThreadStatus | None = None) -> None:
        if status is not None:
            self.thread.status = status
        self.thread.execution = self.snapshot
        self.thread.updated_at = time.time()
        await self.services.save_thread(self.thread, lease_token=self.execution.lease_token)

    async def _end_waiting(self, reason: str) -> None:
        """Stop a waiting thread: each call of its turns without a result gets one saying it was stopped
        (every provider needs a result for each call), and the execution ends, stopped by the caller."""
        stopped = Decision(kind="stopped", reason=f"the thread was stopped while the call waited ({reason})")
        answered = {m.tool_call_id for m in self.execution.message_history if m.role == "tool"}
        for message in list(self.execution.message_history):
            calls = [c for c in message.tool_calls or [] if c.id not in answered and not c.provider_executed]
            if message.depth != 0 or message.side is None or not calls:
                continue
            step = StepTools(self.state, message.side, 0, {}, set(), _no_nested)
            await Dispatcher(self.services, step).store_decided(calls, stopped)
        self.snapshot.end("caller", "stopped")

    async def _finish(self, waiting: set[WaitingKind] | None = None) -> ExecutionResult:
        snapshot, signal = self.snapshot, self.execution.abort_signal
        if waiting and not signal.aborted:
            snapshot.end(snapshot.current_side, awaiting_reason(waiting))
        if signal.aborted:
            snapshot.end(snapshot.current_side, signal.reason or "stopped")  # unless a stop or a side ended it
        status: ThreadStatus = "idle"
        if waiting and not signal.aborted:
            status = "waiting"
        elif snapshot.stopped:
            status = "stopped" if signal.aborted or snapshot.reason == "stopped" else "completed"
        self.publish(
            "execution_stopped",
            {"flow_id": snapshot.flow_id, "reason": snapshot.reason or "rest", "stopped_by": snapshot.stopped_by},
        )
        await self._save(status=status)
        return await self._result()

    async def _fail(self, exc: ProviderError) -> ExecutionResult:
        self.snapshot.end(self.snapshot.current_side, "error")
        self.publish(
            "execution_failed",
            {"flow_id": self.snapshot.flow_id, "error": str(exc), "provider": exc.provider, "status": exc.status},
        )
        await self._save(status="failed")
        raise ExecutionFailed(str(exc), await self._result()) from exc

    async def _store_one(self, message: Message) -> None:
        await self.services.store_messages(self.state, [message])

    async def _fail_output(self, exc: typed_output.OutputProblem) -> ExecutionResult:
        """A typed answer that could not be had: the execution fails, naming the prompt and the fields."""
        self.snapshot.end(self.snapshot.current_side, "output_failed")
        self.publish(
            "execution_failed", {"flow_id": self.snapshot.flow_id, "error": str(exc), "provider": None, "status": None}
        )
        await self._save(status="failed")
        result = await self._result()
        raise OutputFailed(str(exc), result, prompt=exc.prompt, kind=exc.kind, fields=exc.fields) from exc

    def _output(self, new: list[Message]) -> object:
        """The last AI answer's text, or its typed value when its prompt has an output type."""
        answer = next((m for m in reversed(new) if m.role == "assistant" and m.content and m.depth == 0), None)
        if answer is None or answer.side is None:
            return None
        prompt = self.services.definitions.prompts.get(self._side(answer.side).prompt)
        typed, value = typed_output.output_value(prompt.output_spec if prompt else None, answer)
        return value if typed else answer.content

    async def _result(self) -> ExecutionResult:
        snapshot = self.snapshot
        new = [m for m in self.execution.message_history if m.seq > self.first_seq]
        output = self._output(new)
        last = next((m for m in reversed(new) if m.role == "assistant" and m.depth == 0 and m.finish), None)
        return any_result(
            finish=last.finish if last else None,
            truncated=last is not None and last.finish == "length",
            refusal=last.refusal if last else None,
            thread_id=self.thread.id,
            flow_id=snapshot.flow_id,
            stopped_by=snapshot.stopped_by,
            reason=snapshot.reason or "rest",
            step_count=snapshot.step_count,
            side_a_step_count=snapshot.side_a_step_count,
            side_b_step_count=snapshot.side_b_step_count,
            usage=self.thread.usage,
            output=output,
            new_messages=new,
        )
