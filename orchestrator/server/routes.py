"""The HTTP API: threads, their messages, values, env and controls; the catalog.

Routes are thin: they check who is asking, find the thread (404 for a thread
that is missing *or* belongs to someone else, so ids do not leak), and call
the runtime. Long work (executions) goes to `Runs` and answers 202.
"""

from __future__ import annotations

import asyncio
import collections
import functools
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from orchestrator.core.messages import SideName, ThreadRecord
from orchestrator.definitions.define import MessageArgs, ToolDefinition
from orchestrator.engine.executor import ExecutionFailed, ExecutionResult
from orchestrator.runtime import Runtime, Thread
from orchestrator.server.auth import Authenticator, Principal
from orchestrator.server.errors import ApiError, error_responses
from orchestrator.server.runs import QueuedRequestFailed, QueuedRuns, Runs
from orchestrator.server.schemas import (
    ENV_NAME_PATTERN,
    MAX_JSON_DEPTH,
    AgentList,
    AgentOut,
    Control,
    CreateThread,
    EnvList,
    EnvOut,
    ExecutionResultOut,
    ForceTurn,
    MessagesPage,
    SendMessage,
    SetEnv,
    SetValue,
    SideOut,
    Started,
    ThreadList,
    ThreadOut,
    ToolList,
    ToolOut,
    ValueOut,
    json_depth,
)
from orchestrator.storage.base import NotFoundError, ThreadBusyError
from orchestrator.storage.env import EnvWriteRefused

_bearer_doc = HTTPBearer(
    auto_error=False, description="A token from ORCHESTRATOR_TOKENS (omit when the server runs without tokens)"
)
_AUTH = error_responses(401)
_THREAD = error_responses(401, 404, 422)

ThreadId = Annotated[str, Path(min_length=1, max_length=200, description="Thread id, e.g. thr_...")]
Key = Annotated[str, Path(min_length=1, max_length=256, description="Value key")]
EnvName = Annotated[str, Path(pattern=ENV_NAME_PATTERN, description="Env value name")]
Wait = Annotated[bool, Query(description="Wait for the execution to end and answer its result (200) instead of 202")]


class ServerState:
    """What every route needs, kept on `app.state.server`."""

    def __init__(self, runtime: Runtime, auth: Authenticator, runs: Runs | None = None) -> None:
        self.runtime = runtime
        self.auth = auth
        self.runs = runs or Runs(runtime)


def server(request: Request) -> ServerState:
    return request.app.state.server  # type: ignore[no-any-return]


def principal(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_doc)] = None
) -> Principal:
    return server(request).auth.principal(request)


Srv = Annotated[ServerState, Depends(server)]
Who = Annotated[Principal, Depends(principal)]

router = APIRouter()


async def find_thread(srv: ServerState, who: Principal, thread_id: str) -> Thread:
    """The thread if it exists and `who` may see it; else the same 404 either way."""
    try:
        thread = await srv.runtime.get_thread(thread_id)
    except NotFoundError:
        thread = None
    if thread is None or not srv.auth.may_see(who, thread.record.user_id):
        raise ApiError(404, "thread_not_found", f"thread {thread_id[:80]!r} not found", "path.thread_id")
    return thread


def thread_out(srv: ServerState, thread: Thread) -> ThreadOut:
    record = thread.record
    live = thread.execution
    return ThreadOut(
        id=record.id,
        agent=record.agent_id,
        agent_type=thread.agent.type,
        user_id=record.user_id,
        arguments=record.arguments,
        status=record.status,
        running=srv.runs.running(record.id),
        execution=live.snapshot if live is not None else record.execution,
        usage=record.usage,
        created_at=record.created_at,
        updated_at=record.updated_at,
        forked_from=record.forked_from,
        forked_at=record.forked_at,
    )


# -- threads -----------------------------------------------------------------


@router.post(
    "/threads", status_code=201, response_model=ThreadOut, responses=error_responses(401, 403, 422), tags=["threads"]
)
async def create_thread(body: CreateThread, srv: Srv, who: Who) -> ThreadOut:
    """Create a thread of `agent`; with auth on, it belongs to the token's user."""
    user_id = body.user_id
    if srv.auth.enabled:
        if user_id is not None and user_id != who.user_id:
            raise ApiError(403, "forbidden_user", "body.user_id must be your own user id or omitted", "body.user_id")
        user_id = who.user_id
    if body.agent not in srv.runtime.definitions.agents:
        known = ", ".join(sorted(srv.runtime.definitions.agents)) or "none"
        raise ApiError(422, "unknown_agent", f"unknown agent {body.agent[:80]!r}; known agents: {known}", "body.agent")
    try:
        thread = await srv.runtime.create_thread(body.agent, body.arguments, user_id)
    except (ValueError, TypeError) as exc:
        raise ApiError(422, "invalid_arguments", str(exc), "body.arguments") from None
    return thread_out(srv, thread)


@router.get("/threads", response_model=ThreadList, responses=error_responses(401, 422), tags=["threads"])
async def list_threads(
    srv: Srv,
    who: Who,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> ThreadList:
    """Your threads, newest first (all threads when auth is off); the page lists them so nobody pastes ids."""
    user_id = who.user_id if srv.auth.enabled else None
    records = await _newest_first(srv.runtime, user_id, limit, offset)
    threads = []
    for record in records:
        if record.agent_id in srv.runtime.definitions.agents:  # skip threads of agents no longer defined
            threads.append(thread_out(srv, Thread(srv.runtime, record)))
    return ThreadList(threads=threads)


async def _newest_first(runtime: Runtime, user_id: str | None, limit: int, offset: int) -> list[ThreadRecord]:
    """A page of `user_id`'s threads, newest first. Storage lists oldest first, so this reads the user's
    threads in batches and keeps only the last `offset + limit` (memory bounded by the page, reads by the
    user's thread count); a storage `order` would make it one query."""
    keep: collections.deque[ThreadRecord] = collections.deque(maxlen=offset + limit)
    start = 0
    while True:
        batch = await runtime.list_threads(user_id=user_id, limit=_BATCH, offset=start)
        keep.extend(batch)
        if len(batch) < _BATCH:
            break
        start += _BATCH
    newest = list(reversed(keep))
    return newest[offset : offset + limit]


_BATCH = 500


@router.get("/threads/{thread_id}", response_model=ThreadOut, responses=_THREAD, tags=["threads"])
async def get_thread(thread_id: ThreadId, srv: Srv, who: Who) -> ThreadOut:
    return thread_out(srv, await find_thread(srv, who, thread_id))


# -- executions ----------------------------------------------------------------

_RUN_RESPONSES: dict[int | str, dict[str, Any]] = {
    202: {"model": Started, "description": "started; follow it on the WebSocket"},
    200: {"model": ExecutionResultOut, "description": "with ?wait=true: how the execution ended"},
    **error_responses(401, 404, 409, 422, 502, 503),
}


@router.post(
    "/threads/{thread_id}/messages", status_code=202, response_model=None, responses=_RUN_RESPONSES, tags=["executions"]
)
async def send_message(thread_id: ThreadId, body: SendMessage, srv: Srv, who: Who, wait: Wait = False) -> JSONResponse:
    """The person's message (ai_human threads), then side a's turn, in the background."""
    thread = await find_thread(srv, who, thread_id)
    _require_type(thread, "ai_human", "this thread's agent is dual_ai: POST /threads/{id}/run starts it")
    return await _start(srv, thread, body.text, wait)


@router.post(
    "/threads/{thread_id}/run", status_code=202, response_model=None, responses=_RUN_RESPONSES, tags=["executions"]
)
async def run_thread(thread_id: ThreadId, srv: Srv, who: Who, wait: Wait = False) -> JSONResponse:
    """Run a dual_ai thread until its execution stops, in the background."""
    thread = await find_thread(srv, who, thread_id)
    _require_type(
        thread, "dual_ai", "this thread's agent is ai_human: POST /threads/{id}/messages sends the person's turn"
    )
    return await _start(srv, thread, None, wait)


def _require_type(thread: Thread, expected: str, hint: str) -> None:
    if thread.agent.type != expected:
        raise ApiError(409, "wrong_agent_type", hint, "path.thread_id")


async def _start(srv: ServerState, thread: Thread, text: str | None, wait: bool) -> JSONResponse:
    if isinstance(srv.runs, QueuedRuns):
        return await _start_queued(srv.runs, thread, text, wait)
    try:
        task = srv.runs.start(thread, text)
    except ThreadBusyError as exc:
        raise ApiError(409, "thread_busy", str(exc), "path.thread_id") from None
    if not wait or srv.runs.queued:  # a worker runs it: follow it on the WebSocket
        started = Started(thread_id=thread.id, events=f"/threads/{thread.id}/events")
        return JSONResponse(started.model_dump(mode="json"), status_code=202)
    try:
        result = await asyncio.shield(task)  # a client that hangs up does not stop the run
    except ThreadBusyError as exc:
        raise ApiError(409, "thread_busy", str(exc), "path.thread_id") from None
    except ExecutionFailed as exc:
        raise ApiError(502, "execution_failed", str(exc)) from None
    return JSONResponse(result_out(result).model_dump(mode="json"), status_code=200)


async def _start_queued(runs: QueuedRuns, thread: Thread, text: str | None, wait: bool) -> JSONResponse:
    """Answered only once Temporal stored the request; with `wait`, once it ended."""
    from orchestrator.temporal import TemporalUnavailable

    try:
        result = await runs.submit(thread, text, wait=wait)
    except TemporalUnavailable as exc:
        raise ApiError(503, "queue_unavailable", f"the request was not queued: {exc}") from None
    except QueuedRequestFailed as exc:
        raise ApiError(502, exc.code, str(exc)) from None
    if result is None:
        started = Started(thread_id=thread.id, events=f"/threads/{thread.id}/events")
        return JSONResponse(started.model_dump(mode="json"), status_code=202)
    return JSONResponse(result_out(result).model_dump(mode="json"), status_code=200)


async def _queued_control(runs: QueuedRuns, thread: Thread, side: SideName | None) -> bool:
    from orchestrator.temporal import TemporalUnavailable

    try:
        return await (runs.request_stop(thread) if side is None else runs.request_force_turn(thread, side))
    except TemporalUnavailable as exc:
        raise ApiError(503, "queue_unavailable", f"the request was not queued: {exc}") from None


def result_out(result: ExecutionResult) -> ExecutionResultOut:
    return result


@router.post("/threads/{thread_id}/stop", response_model=Control, responses=_THREAD, tags=["executions"])
async def stop_thread(thread_id: ThreadId, srv: Srv, who: Who) -> Control:
    thread = await find_thread(srv, who, thread_id)
    if isinstance(srv.runs, QueuedRuns):
        running = await _queued_control(srv.runs, thread, None)
        return Control(
            thread_id=thread.id, running=running, detail="stop requested: it applies to the running and queued requests"
        )
    stopped = srv.runs.stop(thread)
    return Control(thread_id=thread.id, running=stopped, detail="stop requested" if stopped else "not running")


@router.post("/threads/{thread_id}/force-turn", response_model=Control, responses=_THREAD, tags=["executions"])
async def force_turn(thread_id: ThreadId, body: ForceTurn, srv: Srv, who: Who) -> Control:
    """Give the next turn to `side`: after the current step, or at the next execution."""
    thread = await find_thread(srv, who, thread_id)
    runs = srv.runs
    now = (
        await _queued_control(runs, thread, body.side)
        if isinstance(runs, QueuedRuns)
        else runs.force_turn(thread, body.side)
    )
    detail = f"side {body.side} takes the next turn" + ("" if now else " of the next execution")
    return Control(thread_id=thread.id, running=now, detail=detail)


# -- messages, values, env -------------------------------------------------------


@router.get("/threads/{thread_id}/messages", response_model=MessagesPage, responses=_THREAD, tags=["threads"])
async def get_messages(
    thread_id: ThreadId,
    srv: Srv,
    who: Who,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    order: Literal["asc", "desc"] = "asc",
    include_silent: bool = False,
    max_depth: Annotated[int | None, Query(ge=0, le=100)] = None,
    include_superseded: bool = False,
) -> MessagesPage:
    thread = await find_thread(srv, who, thread_id)
    shown = {"include_silent": include_silent, "include_superseded": include_superseded}
    page = await thread.get_messages(limit=limit, offset=offset, order=order, max_depth=max_depth, **shown)
    return MessagesPage(messages=page.messages, total=page.total, has_more=page.has_more)


@router.get("/threads/{thread_id}/values/{key}", response_model=ValueOut, responses=_THREAD, tags=["threads"])
async def get_value(thread_id: ThreadId, key: Key, srv: Srv, who: Who) -> ValueOut:
    """The value stored under `key` (null when none is)."""
    thread = await find_thread(srv, who, thread_id)
    value = await thread.state.get_value(key)
    if json_depth(value) > MAX_JSON_DEPTH:  # stored before the limit existed: say so rather than fail to serialize
        raise ApiError(422, "value_too_deep", f"the stored value nests deeper than {MAX_JSON_DEPTH} levels", "path.key")
    return ValueOut(key=key, value=value)


@router.put("/threads/{thread_id}/values/{key}", response_model=ValueOut, responses=_THREAD, tags=["threads"])
async def set_value(thread_id: ThreadId, key: Key, body: SetValue, srv: Srv, who: Who) -> ValueOut:
    thread = await find_thread(srv, who, thread_id)
    try:
        await thread.state.set_value(key, body.value)
    except (TypeError, ValueError) as exc:
        raise ApiError(422, "invalid_value", str(exc), "body.value") from None
    return ValueOut(key=key, value=body.value)


@router.get("/threads/{thread_id}/env", response_model=EnvList, responses=_THREAD, tags=["threads"])
async def list_env(thread_id: ThreadId, srv: Srv, who: Who) -> EnvList:
    """The thread's own env values; secrets by name and type only."""
    thread = await find_thread(srv, who, thread_id)
    values = await srv.runtime.storage.list_env("thread", thread.id)
    return EnvList(env=[EnvOut(name=v.name, type=v.type, value=v.value if v.type == "text" else None) for v in values])


@router.put(
    "/threads/{thread_id}/env/{name}",
    response_model=EnvOut,
    responses=error_responses(401, 403, 404, 422),
    tags=["threads"],
)
async def set_env(thread_id: ThreadId, name: EnvName, body: SetEnv, srv: Srv, who: Who) -> EnvOut:
    """Set a thread env value: the thread's owner may, as `state.set_env` may. The operator's names (a tool's
    operator-only variables, names the operator configured) answer 403. The answer never contains a secret's value."""
    thread = await find_thread(srv, who, thread_id)
    state = thread.state
    try:
        await state.set_env(name, body.value, body.type)
    except EnvWriteRefused as exc:
        raise ApiError(403, "env_not_settable", exc.reason, "path.name") from None
    except (TypeError, ValueError) as exc:
        raise ApiError(422, "invalid_env", str(exc), "body") from None
    kind = await state.env_type(name)
    return EnvOut(name=name, type=kind, value=body.value if kind == "text" else None)


# -- catalog -------------------------------------------------------------------


@router.get("/agents", response_model=AgentList, responses=_AUTH, tags=["catalog"])
async def list_agents(srv: Srv, who: Who) -> AgentList:
    agents = []
    for name, agent in sorted(srv.runtime.definitions.agents.items()):
        args = agent.args if agent.args is not None and agent.args is not MessageArgs else None
        agents.append(
            AgentOut(
                name=name,
                type=agent.type,
                title=agent.title,
                side_a=_side(agent.side_a),
                side_b=_side(agent.side_b) if agent.side_b else None,
                max_session_turns=agent.max_session_turns,
                arguments=args.model_json_schema() if args is not None else None,
            )
        )
    return AgentList(agents=agents)


def _side(side: Any) -> SideOut:
    return SideOut(
        prompt=side.prompt,
        stop_on_response=side.stop_on_response,
        stop_tool=side.stop_tool,
        end_conversation_tool=side.end_conversation_tool,
        max_steps=side.max_steps,
    )


@router.get("/tools", response_model=ToolList, responses=_AUTH, tags=["catalog"])
async def list_tools(srv: Srv, who: Who) -> ToolList:
    """What models can call: tools, prompts, exposed agents, with their JSON schemas."""
    from orchestrator.definitions.loader import callable_description, callable_kind
    from orchestrator.definitions.schema import SchemaError, tool_parameters

    defs = srv.runtime.definitions
    tools = []
    for name in defs.callable_names():
        defn = defs.resolve_callable(name)
        try:
            parameters: dict[str, Any] | None = tool_parameters(defn.args, "openai")
        except SchemaError:
            parameters = None
        progress = defn.progress_argument if isinstance(defn, ToolDefinition) else None
        tools.append(
            ToolOut(
                name=name,
                kind=callable_kind(defn),
                description=callable_description(defn),
                parameters=parameters,
                progress_argument=progress,
            )
        )
    return ToolList(tools=tools)


@router.get("/schema/events", tags=["catalog"], response_description="A JSON schema (draft 2020-12)")
async def event_schema() -> dict[str, Any]:
    """The JSON schema of one event on `/threads/{id}/events` (as `orchestrator schema events` prints it).
    No token needed, as for the OpenAPI document: it describes the API, not anyone's data."""
    return _event_schema()


@functools.cache
def _event_schema() -> dict[str, Any]:
    from orchestrator.core.event_types import events_json_schema

    return events_json_schema()
