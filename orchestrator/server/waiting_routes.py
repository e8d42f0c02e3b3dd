"""The HTTP face of calls waiting for the outside (engine/waiting.py): list them, decide them.

    GET  /threads/{id}/waiting                      the open waiting calls (?all=true: decided ones too)
    POST /threads/{id}/calls/{call_id}/approve      {"arguments": {...} | null}
    POST /threads/{id}/calls/{call_id}/reject       {"reason": "..."}
    POST /threads/{id}/calls/{call_id}/result       {"status": "success", "result": "..."} (a deferred call)
    POST /threads/{id}/calls/{call_id}/answer       {"answer": <JSON>} (a tool's `state.ask`)

The same rights as the thread: a caller who may not see it gets the thread's 404. A decision that cannot
apply (unknown call, decided already, the wrong kind, edited arguments that break the tool's schema) is a
409 naming the call; nothing is stored. The decision that leaves no call open resumes the thread in the
background (`resumed: true`), here or, with Temporal workers, as a resume request to the thread's workflow; clients
follow it on the WebSocket like any execution.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.results import ToolResult
from orchestrator.core.waiting import Decision, WaitingArgumentsError, WaitingCall, WaitingCallError
from orchestrator.runtime import Thread
from orchestrator.server.errors import ApiError, error_responses
from orchestrator.server.routes import ServerState, Srv, ThreadId, Who, find_thread
from orchestrator.server.runs import QueuedRuns
from orchestrator.server.schemas import MAX_JSON_DEPTH, ShallowJson

router = APIRouter(tags=["waiting calls"])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


CallId = Annotated[str, Path(min_length=1, max_length=200, description="The tool call's id (`call_id` of its event)")]
_DECIDE = error_responses(401, 404, 409, 422)


class WaitingList(_Strict):
    thread_id: str
    calls: list[WaitingCall]


class Approve(_Strict):
    arguments: dict[str, ShallowJson] | None = Field(
        default=None, description="Edited arguments, checked against the tool's schema; null: the model's own"
    )


class Reject(_Strict):
    reason: str = Field(min_length=1, max_length=10_000, description="What the model reads as the call's error")


class SubmitResult(_Strict):
    status: Literal["success", "error"] = "success"
    result: str | None = Field(default=None, max_length=1_000_000)
    error: str | None = Field(default=None, max_length=100_000)


class Answer(_Strict):
    answer: ShallowJson = Field(description=f"What `state.ask` returns: any JSON nesting at most {MAX_JSON_DEPTH}")


class Decided(_Strict):
    thread_id: str
    call_id: str
    resumed: bool = Field(description="True: no call is left waiting and the thread goes on (follow its events)")


@router.get("/threads/{thread_id}/waiting", response_model=WaitingList, responses=error_responses(401, 404, 422))
async def list_waiting(
    thread_id: ThreadId,
    srv: Srv,
    who: Who,
    all: Annotated[bool, Query(description="Decided calls too")] = False,
) -> WaitingList:
    thread = await find_thread(srv, who, thread_id)
    if await srv.runtime.waiting.expire_thread(thread.id):  # overdue approvals rejected: it may go on now
        await _resume(srv, thread)
    calls = await srv.runtime.waiting.calls(thread.id, open_only=not all)
    return WaitingList(thread_id=thread.id, calls=calls)


@router.post("/threads/{thread_id}/calls/{call_id}/approve", response_model=Decided, responses=_DECIDE)
async def approve(thread_id: ThreadId, call_id: CallId, body: Approve, srv: Srv, who: Who) -> Decided:
    thread = await find_thread(srv, who, thread_id)
    return await _decide(srv, thread, call_id, Decision(kind="approved", arguments=body.arguments))


@router.post("/threads/{thread_id}/calls/{call_id}/reject", response_model=Decided, responses=_DECIDE)
async def reject(thread_id: ThreadId, call_id: CallId, body: Reject, srv: Srv, who: Who) -> Decided:
    thread = await find_thread(srv, who, thread_id)
    return await _decide(srv, thread, call_id, Decision(kind="rejected", reason=body.reason))


@router.post("/threads/{thread_id}/calls/{call_id}/result", response_model=Decided, responses=_DECIDE)
async def submit_result(thread_id: ThreadId, call_id: CallId, body: SubmitResult, srv: Srv, who: Who) -> Decided:
    thread = await find_thread(srv, who, thread_id)
    result = ToolResult(status=body.status, result=body.result, error=body.error)
    return await _decide(srv, thread, call_id, Decision(kind="result", result=result))


@router.post("/threads/{thread_id}/calls/{call_id}/answer", response_model=Decided, responses=_DECIDE)
async def answer(thread_id: ThreadId, call_id: CallId, body: Answer, srv: Srv, who: Who) -> Decided:
    thread = await find_thread(srv, who, thread_id)
    return await _decide(srv, thread, call_id, Decision(kind="answer", answer=body.answer))


async def _decide(srv: ServerState, thread: Thread, call_id: str, decision: Decision) -> Decided:
    try:
        settled = await srv.runtime.waiting.decide(thread.id, call_id, decision)
    except WaitingArgumentsError as exc:
        raise ApiError(422, "invalid_arguments", str(exc), "body.arguments") from None
    except WaitingCallError as exc:
        raise ApiError(409, "not_waiting", str(exc), "path.call_id") from None
    resumed = await _resume(srv, thread) if settled else False
    return Decided(thread_id=thread.id, call_id=call_id, resumed=resumed)


async def _resume(srv: ServerState, thread: Thread) -> bool:
    """Go on with the thread: here, or on a Temporal worker (a resume request to its workflow)."""
    if isinstance(srv.runs, QueuedRuns):
        from orchestrator.temporal import TemporalUnavailable

        try:
            await srv.runs.submit_resume(thread)
        except TemporalUnavailable as exc:  # decided and stored: a later decision or GET .../waiting retries
            raise ApiError(503, "queue_unavailable", f"decided, but the resume was not queued: {exc}") from None
        return True
    return await thread.resume() is not None
