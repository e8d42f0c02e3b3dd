"""The AG-UI endpoint's work (agui.py routes to it): the input checked, the thread found or made, the
execution started and its events streamed through `agui_events.AguiTranslator` and the protocol's
`EventEncoder`. Imported only when the `agui` extra is installed."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import structlog
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    ToolMessage,
)
from ag_ui.encoder import EventEncoder
from fastapi import Request
from fastapi.responses import StreamingResponse
from jsonschema.exceptions import SchemaError
from pydantic import ValidationError

from orchestrator.core.event_types import parse_event
from orchestrator.core.results import ToolResult
from orchestrator.core.waiting import WaitingCallError
from orchestrator.definitions.define import DefinitionError, ToolDefinition
from orchestrator.engine.client_tools import client_tool
from orchestrator.runtime import Thread
from orchestrator.server.agui_events import AguiTranslator
from orchestrator.server.auth import Principal
from orchestrator.server.errors import ApiError
from orchestrator.server.routes import ServerState
from orchestrator.server.runs import QueuedRuns
from orchestrator.server.schemas import MAX_JSON_DEPTH, json_depth
from orchestrator.storage.base import NotFoundError, StorageError, ThreadBusyError
from orchestrator.storage.events import SubscriberLagging

__all__ = ["MAX_CLIENT_TOOLS", "MAX_STATE_KEYS", "THREAD_ID_PATTERN", "client_tools", "read_input", "run", "thread_of"]

_log = structlog.get_logger("orchestrator.server")
THREAD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"  # ids a client may choose: no paths, no spaces
MAX_STATE_KEYS = 100  # top-level keys of the input state, each one value in the store
MAX_CLIENT_TOOLS = 50  # frontend tools one run may declare
MAX_RESULT_CHARS = 1_000_000  # one frontend tool result's content (the body limit bounds them all)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_THREAD_ID = re.compile(THREAD_ID_PATTERN)


async def read_input(request: Request) -> RunAgentInput:
    """The body as a `RunAgentInput`, checked beyond its schema: what this endpoint can honour."""
    try:
        body = RunAgentInput.model_validate_json(await request.body())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("body", *first["loc"]))
        raise ApiError(422, "invalid_request", f"{first['msg']} (a RunAgentInput was expected)", where) from None
    _check_tools(body)
    if body.state is not None and not isinstance(body.state, dict):
        raise ApiError(422, "invalid_state", "must be a JSON object (one store key per field)", "body.state")
    if body.state is not None and len(body.state) > MAX_STATE_KEYS:
        raise ApiError(422, "invalid_state", f"at most {MAX_STATE_KEYS} keys, got {len(body.state)}", "body.state")
    if body.state is not None and not all(0 < len(key) <= 256 for key in body.state):
        raise ApiError(422, "invalid_state", "keys must be 1-256 characters", "body.state")
    if body.state is not None and json_depth(body.state) > MAX_JSON_DEPTH:
        raise ApiError(422, "invalid_state", f"nests deeper than {MAX_JSON_DEPTH} levels", "body.state")
    return body


def _check_tools(body: RunAgentInput) -> None:
    """The declared frontend tools: a bounded number, names a provider takes, each once, schemas of objects."""
    declared = body.tools or []
    if len(declared) > MAX_CLIENT_TOOLS:
        message = f"at most {MAX_CLIENT_TOOLS} frontend tools, got {len(declared)}"
        raise ApiError(422, "invalid_tools", message, "body.tools")
    seen: set[str] = set()
    for i, tool in enumerate(declared):
        if not _TOOL_NAME.match(tool.name) or tool.name in seen:
            message = "must be 1-64 letters, digits, '_' or '-', each name once"
            raise ApiError(422, "invalid_tools", message, f"body.tools[{i}].name")
        seen.add(tool.name)
        params = tool.parameters if tool.parameters is not None else {}
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise ApiError(422, "invalid_tools", "must be a JSON schema of an object", f"body.tools[{i}].parameters")
        if json_depth(params) > MAX_JSON_DEPTH or len(tool.description) > 4000:
            message = f"nests deeper than {MAX_JSON_DEPTH} levels, or its description is over 4000 characters"
            raise ApiError(422, "invalid_tools", message, f"body.tools[{i}]")


def client_tools(body: RunAgentInput) -> list[ToolDefinition]:
    """The run's frontend tools as deferred tools (engine/client_tools.py): the client answers their calls."""
    out: list[ToolDefinition] = []
    for i, tool in enumerate(body.tools or []):
        try:
            out.append(client_tool(tool.name, tool.description, dict(tool.parameters or {})))
        except (DefinitionError, SchemaError) as exc:
            message = f"not a usable JSON schema: {str(exc)[:200]}"
            raise ApiError(422, "invalid_tools", message, f"body.tools[{i}].parameters") from None
    return out


async def thread_of(srv: ServerState, who: Principal, agent: str, body: RunAgentInput) -> Thread:
    thread_id = body.thread_id
    if not _THREAD_ID.match(thread_id):
        message = "must be 1-200 letters, digits, '_', '.', ':' or '-', starting with a letter or digit"
        raise ApiError(422, "invalid_request", message, "body.threadId")
    try:
        thread = await srv.runtime.get_thread(thread_id)
    except NotFoundError:
        return await _create(srv, who.user_id, agent, body)
    if not srv.auth.may_see(who, thread.record.user_id):
        raise ApiError(404, "thread_not_found", f"thread {thread_id[:80]!r} not found", "body.threadId")
    if thread.record.agent_id != agent:
        message = f"thread {thread_id[:80]!r} runs agent {thread.record.agent_id!r}, not {agent[:80]!r}"
        raise ApiError(409, "wrong_agent", message, "body.threadId")
    return thread


async def _create(srv: ServerState, user_id: str | None, agent: str, body: RunAgentInput) -> Thread:
    props = body.forwarded_props if isinstance(body.forwarded_props, dict) else {}
    arguments = props.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise ApiError(422, "invalid_arguments", "must be an object", "body.forwardedProps.arguments")
    try:
        return await srv.runtime.create_thread(agent, arguments, user_id, thread_id=body.thread_id)
    except (ValueError, TypeError) as exc:
        raise ApiError(422, "invalid_arguments", str(exc), "body.forwardedProps.arguments") from None
    except StorageError:  # created meanwhile by another request (or another user): answer as for theirs
        raise ApiError(404, "thread_not_found", f"thread {body.thread_id[:80]!r} not found", "body.threadId") from None


def _tool_results(body: RunAgentInput) -> list[tuple[int, ToolMessage]]:
    """The trailing tool messages (with their index): the client's results for its tools' calls."""
    out: list[tuple[int, ToolMessage]] = []
    for index in range(len(body.messages) - 1, -1, -1):
        message = body.messages[index]
        if not isinstance(message, ToolMessage):
            break
        out.insert(0, (index, message))
    return out


async def _check_results(thread: Thread, results: list[tuple[int, ToolMessage]]) -> None:
    """Each result must answer a call of this thread waiting for one (a frontend tool's); else nothing is stored."""
    waiting = {c.call_id for c in await thread.waiting_calls() if c.kind == "result"}
    for index, message in results:
        if message.tool_call_id not in waiting:
            text = f"no call of this thread waits for a result (tool call {message.tool_call_id[:80]!r})"
            raise ApiError(422, "unexpected_tool_result", text, f"body.messages[{index}]")
        if len(_text(message)) > MAX_RESULT_CHARS:
            text = f"a tool result is at most {MAX_RESULT_CHARS} characters, got {len(_text(message))}"
            raise ApiError(422, "invalid_request", text, f"body.messages[{index}].content")
        waiting.discard(message.tool_call_id)  # the same call answered twice in one input: the second is refused


def _text(message: ToolMessage) -> str:
    """A tool message's content as text (its text parts; a frontend tool answers in text)."""
    if isinstance(message.content, str):
        return message.content
    return "".join(getattr(part, "text", "") for part in message.content)


def _person_text(thread: Thread, body: RunAgentInput) -> str | None:
    """The person's new message (ai_human), None for a dual_ai thread, which only runs."""
    last = body.messages[-1] if body.messages else None
    if thread.agent.type == "dual_ai":
        return None
    if last is None or last.role != "user":
        raise ApiError(422, "invalid_request", "must end with the person's (role user) message", "body.messages")
    content = last.content
    if not isinstance(content, str):
        if any(part.type != "text" for part in content):
            raise ApiError(422, "invalid_request", "only text parts are supported", "body.messages[-1].content")
        content = "".join(part.text for part in content if part.type == "text")
    if not content.strip():
        raise ApiError(422, "invalid_request", "the person's message is empty", "body.messages[-1].content")
    return content


async def run(srv: ServerState, thread: Thread, body: RunAgentInput) -> StreamingResponse:
    """Start the execution, or resume it with the client's tool results (409 now if the thread is busy),
    then answer its events as they come."""
    results = _tool_results(body)
    text = None if results else _person_text(thread, body)
    tools = client_tools(body)
    _check_names(srv, thread, body)
    if tools and isinstance(srv.runs, QueuedRuns):
        message = "frontend tools need the server to run executions itself, not workers (docs/server.md)"
        raise ApiError(422, "frontend_tools_unsupported", message, "body.tools")
    if srv.runs.running(thread.id):  # before the state is written: a refused run changes nothing
        raise ApiError(409, "thread_busy", f"thread {thread.id} is already running an execution", "body.threadId")
    if results:
        await _check_results(thread, results)
    elif (await thread.refresh()).status == "waiting":
        message = f"thread {thread.id} waits for tool results; send them as tool messages first"
        raise ApiError(409, "thread_waiting", message, "body.messages")
    keys = await _write_state(thread, body.state)
    after = await srv.runtime.storage.last_event_seq(thread.id)
    resumed = True
    if results:
        resumed = await _submit(thread, results, tools)
    else:
        await _start(srv, thread, text, tools)
    encoder = EventEncoder()
    run = _RunStream(srv, thread, body, keys, idle=not resumed)
    frames = (encoder.encode(event) async for event in run.events(after))
    return StreamingResponse(frames, media_type=encoder.get_content_type(), headers={"Cache-Control": "no-store"})


async def _write_state(thread: Thread, state: object) -> list[str]:
    if not isinstance(state, dict):
        return []
    for key, value in state.items():
        try:
            await thread.state.set_value(key, value)
        except (TypeError, ValueError) as exc:
            raise ApiError(422, "invalid_state", str(exc), f"body.state.{key[:40]}") from None
    return list(state)


def _check_names(srv: ServerState, thread: Thread, body: RunAgentInput) -> None:
    """A frontend tool named like one of the agent's own (an MCP server's are checked when its tools are listed,
    which fails the run): the model could not tell them apart."""
    definitions = srv.runtime.definitions
    own = {
        name
        for side in (thread.agent.side_a, thread.agent.side_b)
        if side is not None and side.prompt in definitions.prompts
        for name in definitions.prompts[side.prompt].tools
    }
    for i, tool in enumerate(body.tools or []):
        if tool.name in own:
            message = f"{tool.name!r} is the name of one of the agent's own tools; rename the frontend tool"
            raise ApiError(422, "invalid_tools", message, f"body.tools[{i}].name")


async def _submit(thread: Thread, results: list[tuple[int, ToolMessage]], tools: list[ToolDefinition]) -> bool:
    """Store the client's results (`submit_result`); True when that resumed the thread (none left waiting)."""
    task = None
    for index, message in results:
        result = ToolResult.fail(message.error) if message.error else ToolResult.ok(_text(message))
        try:
            task = await thread.submit_result(message.tool_call_id, result, tools=tools)
        except WaitingCallError as exc:  # decided meanwhile by another request
            raise ApiError(409, "unexpected_tool_result", str(exc), f"body.messages[{index}]") from None
    return task is not None


async def _start(srv: ServerState, thread: Thread, text: str | None, tools: list[ToolDefinition]) -> None:
    runs = srv.runs
    try:
        if tools:  # in-process only (checked): the run's tools go with this start
            await thread.start(text, tools=tools)
        elif isinstance(runs, QueuedRuns):
            await runs.submit(thread, text)
        else:
            runs.start(thread, text)
    except ThreadBusyError as exc:
        raise ApiError(409, "thread_busy", str(exc), "body.threadId") from None


class _RunStream:
    """One response: RUN_STARTED and the state, the execution's events translated, then RUN_FINISHED or
    RUN_ERROR. A client gone before the end stops the execution."""

    def __init__(
        self, srv: ServerState, thread: Thread, body: RunAgentInput, keys: list[str], *, idle: bool = False
    ) -> None:
        self.srv = srv
        self.idle = idle  # nothing started (other calls still wait): the run ends at once
        self.thread = thread
        self.body = body
        self.keys = keys
        self.state: dict[str, Any] = {}
        self.translator = AguiTranslator(thread.id, body.run_id or uuid.uuid4().hex)

    async def events(self, after: int) -> AsyncIterator[BaseEvent]:
        yield RunStartedEvent(thread_id=self.thread.id, run_id=self.translator.run_id)
        if self.keys:
            self.state = await self._read_state()
            yield StateSnapshotEvent(snapshot=self.state)
        if self.idle:
            yield await self._still_waiting()
            return
        try:
            async for event in self._translated(after):
                yield event
        finally:
            if not self.translator.ended:
                await self._client_gone()

    async def _translated(self, after: int) -> AsyncIterator[BaseEvent]:
        started = False
        try:
            async for raw in self.thread.events(after=after):
                started = started or raw.type == "execution_started"
                if not started:
                    continue  # an earlier execution's last events
                if raw.type in ("execution_stopped", "execution_failed"):
                    delta = await self._state_delta()  # the state as the run left it, before its end
                    if delta is not None:
                        yield delta
                for out in self.translator.translate(parse_event(raw)):
                    yield out
                if self.translator.ended:
                    return
                if raw.type == "tool_result":
                    delta = await self._state_delta()
                    if delta is not None:
                        yield delta
        except SubscriberLagging:
            for out in self.translator.fail("the client fell behind the run's events", "fell_behind"):
                yield out

    async def _still_waiting(self) -> BaseEvent:
        """RUN_FINISHED for a run that stored results but left calls waiting: they are its pending calls."""
        self.translator.ended = True
        pending = [c.call_id for c in await self.thread.waiting_calls()]
        outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=pending or None)
        result = {"reason": "awaiting_result", "stopped_by": None}
        return RunFinishedEvent(thread_id=self.thread.id, run_id=self.translator.run_id, result=result, outcome=outcome)

    async def _read_state(self) -> dict[str, Any]:
        return {key: await self.thread.state.get_value(key) for key in self.keys}

    async def _state_delta(self) -> BaseEvent | None:
        """STATE_DELTA for the mirrored keys a tool changed since the last look, None when none did."""
        if not self.keys:
            return None
        now = await self._read_state()
        changed = [key for key, value in now.items() if self.state.get(key) != value]
        self.state = now
        ops = [{"op": "replace", "path": "/" + _pointer(key), "value": now[key]} for key in changed]
        return StateDeltaEvent.model_validate({"delta": ops}) if ops else None

    async def _client_gone(self) -> None:
        """The response ended before the run did (the client aborted): stop the execution."""
        runs = self.srv.runs
        with contextlib.suppress(Exception):
            if isinstance(runs, QueuedRuns):
                await asyncio.shield(runs.request_stop(self.thread, "AG-UI client aborted the run"))
            else:
                runs.stop(self.thread, "AG-UI client aborted the run")
        _log.info("agui_client_aborted", thread_id=self.thread.id)


def _pointer(key: str) -> str:
    """A key as one JSON Pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
