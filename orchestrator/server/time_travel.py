"""Fork and rewind over HTTP, and a thread's fork tree (docs/server.md, "Time travel").

Each route finds the thread with the caller's rights first (`routes.find_thread`: another user's
thread is the same 404 as a missing one). A fork belongs to the thread's own user, whoever asks.
"""

from __future__ import annotations

from fastapi import APIRouter

from orchestrator.runtime import Thread
from orchestrator.server.errors import ApiError, error_responses
from orchestrator.server.routes import Srv, ThreadId, Who, find_thread, thread_out
from orchestrator.server.schemas import ForkBody, ForkTree, RewindBody, Rewound, ThreadOut
from orchestrator.storage.base import ThreadBusyError
from orchestrator.storage.history import HistoryPointError

router = APIRouter()

_TREE_SCAN = 1000  # threads of one user read to find a tree's forks


def _point_error(exc: HistoryPointError, field: str) -> ApiError:
    return ApiError(422, "invalid_point", str(exc), field)


@router.post(
    "/threads/{thread_id}/fork",
    status_code=201,
    response_model=ThreadOut,
    responses=error_responses(401, 404, 422),
    tags=["threads"],
)
async def fork_thread(thread_id: ThreadId, body: ForkBody, srv: Srv, who: Who) -> ThreadOut:
    """A new thread with this one's history up to and including message `at` (values, env and files as
    they were then); this one is untouched. A point inside a step (a call without its result) is a 422
    naming the nearest valid points."""
    thread = await find_thread(srv, who, thread_id)
    try:
        fork = await thread.fork(body.at)
    except HistoryPointError as exc:
        raise _point_error(exc, "body.at") from None
    return thread_out(srv, fork)


@router.post(
    "/threads/{thread_id}/rewind",
    response_model=Rewound,
    responses=error_responses(401, 404, 409, 422),
    tags=["threads"],
)
async def rewind_thread(thread_id: ThreadId, body: RewindBody, srv: Srv, who: Who) -> Rewound:
    """The thread continues from message `to`; later messages, values and events are kept, marked
    superseded. 409 while an execution runs."""
    thread = await find_thread(srv, who, thread_id)
    if srv.runs.running(thread.id):
        raise ApiError(409, "thread_busy", f"thread {thread.id!r} has an execution running; stop it first")
    try:
        superseded = await thread.rewind(body.to)
    except HistoryPointError as exc:
        raise _point_error(exc, "body.to") from None
    except ThreadBusyError as exc:
        raise ApiError(409, "thread_busy", str(exc)) from None
    return Rewound(thread_id=thread.id, to=body.to, superseded=superseded)


@router.get("/threads/{thread_id}/tree", response_model=ForkTree, responses=error_responses(401, 404), tags=["threads"])
async def fork_tree(thread_id: ThreadId, srv: Srv, who: Who) -> ForkTree:
    """The thread's fork tree: up to the first thread it descends from that you may see, then every
    fork of it (among its user's latest 1,000 threads)."""
    thread = await find_thread(srv, who, thread_id)
    root = await _root(srv, who, thread)
    owned = await srv.runtime.list_threads(user_id=root.record.user_id, limit=_TREE_SCAN)
    children: dict[str, list[str]] = {}
    for record in owned:
        if record.forked_from is not None:
            children.setdefault(record.forked_from, []).append(record.id)
    by_id = {record.id: record for record in owned}
    found, todo = [root.id], [root.id]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    threads = [thread_out(srv, Thread(srv.runtime, by_id[i])) if i in by_id else thread_out(srv, root) for i in found]
    return ForkTree(root=root.id, threads=threads)


async def _root(srv: Srv, who: Who, thread: Thread) -> Thread:
    seen = {thread.id}
    while thread.record.forked_from is not None and thread.record.forked_from not in seen:
        try:
            thread = await find_thread(srv, who, thread.record.forked_from)
        except ApiError:
            break  # a source gone, or not yours: the tree starts here
        seen.add(thread.id)
    return thread
