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
from ag_ui.core import BaseEvent, RunAgentInput, RunStartedEvent, StateDeltaEvent, StateSnapshotEvent
from ag_ui.encoder import EventEncoder
from fastapi import Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from orchestrator.core.event_types import parse_event
from orchestrator.runtime import Thread
from orchestrator.server.agui_events import AguiTranslator
from orchestrator.server.auth import Principal
from orchestrator.server.errors import ApiError
from orchestrator.server.routes import ServerState
from orchestrator.server.runs import QueuedRuns
from orchestrator.server.schemas import MAX_JSON_DEPTH, json_depth
from orchestrator.storage.base import NotFoundError, StorageError, ThreadBusyError
from orchestrator.storage.events import SubscriberLagging

__all__ = ["MAX_STATE_KEYS", "THREAD_ID_PATTERN", "read_input", "run", "thread_of"]

_log = structlog.get_logger("orchestrator.server")
THREAD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"  # ids a client may choose: no paths, no spaces
MAX_STATE_KEYS = 100  # top-level keys of the input state, each one value in the store
_THREAD_ID = re.compile(THREAD_ID_PATTERN)


async def read_input(request: Request) -> RunAgentInput:
    """The body as a `RunAgentInput`, checked beyond its schema: what this endpoint can honour."""
    try:
        body = RunAgentInput.model_validate_json(await request.body())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("body", *first["loc"]))
        raise ApiError(422, "invalid_request", f"{first['msg']} (a RunAgentInput was expected)", where) from None
    if body.tools:
        names = ", ".join(t.name[:40] for t in body.tools[:5])
        message = f"frontend tools are not supported yet (declared: {names}); send no tools"
        raise ApiError(422, "frontend_tools_unsupported", message, "body.tools")
    if body.state is not None and not isinstance(body.state, dict):
        raise ApiError(422, "invalid_state", "must be a JSON object (one store key per field)", "body.state")
    if body.state is not None and len(body.state) > MAX_STATE_KEYS:
        raise ApiError(422, "invalid_state", f"at most {MAX_STATE_KEYS} keys, got {len(body.state)}", "body.state")
    if body.state is not None and json_depth(body.state) > MAX_JSON_DEPTH:
        raise ApiError(422, "invalid_state", f"nests deeper than {MAX_JSON_DEPTH} levels", "body.state")
    return body


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


def _person_text(thread: Thread, body: RunAgentInput) -> str | None:
    """The person's new message (ai_human), None for a dual_ai thread, which only runs."""
    last = body.messages[-1] if body.messages else None
    if last is not None and last.role == "tool":
        message = f"no call of this thread waits for a result (tool call {last.tool_call_id[:80]!r})"
        raise ApiError(422, "unexpected_tool_result", message, f"body.messages[{len(body.messages) - 1}]")
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
    """Start the execution (409 now if the thread is busy), then answer its events as they come."""
    text = _person_text(thread, body)
    keys = await _write_state(thread, body.state)
    after = await srv.runtime.storage.last_event_seq(thread.id)
    await _start(srv, thread, text)
    encoder = EventEncoder()
    run = _RunStream(srv, thread, body, keys)
    frames = (encoder.encode(event) async for event in run.events(after))
    return StreamingResponse(frames, media_type=encoder.get_content_type(), headers={"Cache-Control": "no-store"})


async def _write_state(thread: Thread, state: object) -> list[str]:
    if not isinstance(state, dict):
        return []
    for key, value in state.items():
        if not 0 < len(key) <= 256:
            raise ApiError(422, "invalid_state", "keys must be 1-256 characters", "body.state")
        try:
            await thread.state.set_value(key, value)
        except (TypeError, ValueError) as exc:
            raise ApiError(422, "invalid_state", str(exc), f"body.state.{key[:40]}") from None
    return list(state)


async def _start(srv: ServerState, thread: Thread, text: str | None) -> None:
    runs = srv.runs
    try:
        if isinstance(runs, QueuedRuns):
            await runs.submit(thread, text)
        else:
            runs.start(thread, text)
    except ThreadBusyError as exc:
        raise ApiError(409, "thread_busy", str(exc), "body.threadId") from None


class _RunStream:
    """One response: RUN_STARTED and the state, the execution's events translated, then RUN_FINISHED or
    RUN_ERROR. A client gone before the end stops the execution."""

    def __init__(self, srv: ServerState, thread: Thread, body: RunAgentInput, keys: list[str]) -> None:
        self.srv = srv
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
