"""AG-UI: `POST /ag-ui/{agent}` and `POST /ag-ui/threads/{thread_id}`, a run streamed as AG-UI events over SSE.

What an AG-UI frontend (CopilotKit, `@ag-ui/client`'s `HttpAgent`) sends is a `RunAgentInput`: the
thread, a run id, the whole conversation as the client has it, its state, and its tools. The thread's
history lives here, so only what is new is taken from it: the last message, the person's turn (an
`ai_human` agent; a `dual_ai` one just runs). The answer is the execution's events, translated by
`agui_events.AguiTranslator`, encoded by the protocol's own `EventEncoder`.

- Threads: AG-UI's `threadId` is the thread's id. `/ag-ui/{agent}` continues that thread when it exists
  (it must be yours and of that agent) and creates it, yours, when it does not, with
  `forwardedProps.arguments` as the agent's arguments; `/ag-ui/threads/{id}` only continues. Another
  user's thread is the same 404 as a missing one on `/ag-ui/threads/{id}`, as on the rest of the API.
- State: AG-UI's shared state is the thread's key-value store, key by key: the input's `state` object is
  written into it, STATE_SNAPSHOT answers those keys' values, and STATE_DELTA (JSON Patch) follows each
  change a tool makes to one of them (read after every tool result, and at the end). The store cannot
  list its keys, so a key the client never named is not mirrored.
- Stop: the client aborting the request (closing the stream) stops the execution, as
  `POST /threads/{id}/stop` does; the history stays what a stop leaves. RUN_FINISHED then carries the
  `cancelled` outcome (also when stopped from elsewhere).
- Frontend tools (`RunAgentInput.tools`) are not offered to the model yet: a run whose input declares
  tools, or ends with a tool result, is refused with 422, so no client believes its tools are in use.

Auth is the API's bearer token; a body is bounded by the app's body limit, and the state by the limits
below.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import StreamingResponse

from orchestrator.core.extras import MissingExtra, require
from orchestrator.server.errors import ApiError, error_responses
from orchestrator.server.routes import Srv, Who, find_thread

__all__ = ["router"]

router = APIRouter(tags=["ag-ui"])
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "the run's AG-UI events, as SSE"},
    **error_responses(401, 404, 409, 501),
}
AgentName = Annotated[str, Path(min_length=1, max_length=200, description="The agent to run")]
ThreadId = Annotated[str, Path(min_length=1, max_length=200, description="Thread id (AG-UI threadId)")]


def _require() -> None:
    """501 naming the extra when `ag-ui-protocol` is not installed (the rest of the server works without it)."""
    try:
        require("ag_ui.core", feature="the AG-UI endpoint (POST /ag-ui/...)", extra="agui")
    except MissingExtra as exc:
        raise ApiError(501, "missing_extra", str(exc)) from None


@router.post("/ag-ui/threads/{thread_id}", response_model=None, responses=_RESPONSES)
async def run_thread(thread_id: ThreadId, request: Request, srv: Srv, who: Who) -> StreamingResponse:
    """Continue one of your threads with a `RunAgentInput` (its `threadId` must be this id)."""
    _require()
    from orchestrator.server import agui_run

    body = await agui_run.read_input(request)
    if body.thread_id != thread_id:
        raise ApiError(422, "invalid_request", f"must equal the path's thread id {thread_id[:80]!r}", "body.threadId")
    return await agui_run.run(srv, await find_thread(srv, who, thread_id), body)


@router.post("/ag-ui/{agent}", response_model=None, responses=_RESPONSES)
async def run_agent(agent: AgentName, request: Request, srv: Srv, who: Who) -> StreamingResponse:
    """Run `agent` on the thread `threadId`: continued when it exists, created (yours) when it does not."""
    _require()
    from orchestrator.server import agui_run

    body = await agui_run.read_input(request)
    if agent not in srv.runtime.definitions.agents:
        known = ", ".join(sorted(srv.runtime.definitions.agents)) or "none"
        raise ApiError(404, "unknown_agent", f"unknown agent {agent[:80]!r}; known agents: {known}", "path.agent")
    thread = await agui_run.thread_of(srv, who, agent, body)
    return await agui_run.run(srv, thread, body)
