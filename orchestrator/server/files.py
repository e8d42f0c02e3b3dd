"""A thread's attachments over HTTP: the list, and each file's bytes.

Same rules as every thread route (`find_thread`: 404 for a thread that is
missing or someone else's). File names and types come from tools, which is to
say from model output: hostile. So a file is served with `nosniff`, a sandboxing
CSP, and `Content-Disposition: attachment` unless it is a raster image a browser
can only draw; active types (HTML, SVG, XML, scripts), and a type that is not one
(stored before types were checked, `orchestrator/core/mime.py`), go out as
`application/octet-stream`, and the name is sent RFC 6266-encoded.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Path
from fastapi.responses import Response
from pydantic import BaseModel

from orchestrator.core.mime import mime_problem
from orchestrator.core.results import AttachmentRef
from orchestrator.server.errors import ApiError, error_responses
from orchestrator.server.routes import Srv, ThreadId, Who, find_thread
from orchestrator.storage.base import NotFoundError

__all__ = ["FileList", "FileOut", "router"]

INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Shown inline (the page draws them); every other type is a download."""
_ACTIVE = ("html", "xhtml", "svg", "xml", "javascript", "ecmascript", "x-sh", "wasm")
_FILE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "private, max-age=3600",
}

FileId = Annotated[str, Path(min_length=1, max_length=200, description="File id, from the thread's file list")]
router = APIRouter(tags=["files"])


class FileOut(AttachmentRef):
    """An attachment as the file list shows it: where it is and how it is served."""

    message_seq: int  # the message that carries it
    url: str
    inline: bool  # served for display (an image) rather than as a download


class FileList(BaseModel):
    files: list[FileOut]


@router.get("/threads/{thread_id}/files", response_model=FileList, responses=error_responses(401, 404, 422))
async def list_files(thread_id: ThreadId, srv: Srv, who: Who) -> FileList:
    """The thread's attachments in message order (what tools and people attached)."""
    thread = await find_thread(srv, who, thread_id)
    messages = (await thread.get_messages(include_silent=True)).messages
    seen: set[str] = set()
    files = []
    for message in messages:
        for ref in message.attachments:
            if ref.id in seen:
                continue
            seen.add(ref.id)
            files.append(
                FileOut(
                    **ref.model_dump(),
                    message_seq=message.seq,
                    url=f"/threads/{quote(thread_id, safe='')}/files/{quote(ref.id, safe='')}",
                    inline=ref.mime_type in INLINE_TYPES,
                )
            )
    return FileList(files=files)


@router.get("/threads/{thread_id}/files/{file_id}", response_class=Response, responses=error_responses(401, 404, 422))
async def get_file(thread_id: ThreadId, file_id: FileId, srv: Srv, who: Who) -> Response:
    """The file's bytes: images inline, everything else as a download."""
    await find_thread(srv, who, thread_id)
    try:
        ref, data = await srv.runtime.storage.get_file(thread_id, file_id)
    except NotFoundError:
        raise ApiError(
            404, "file_not_found", f"file {file_id[:80]!r} not found in this thread", "path.file_id"
        ) from None
    inline = ref.mime_type in INLINE_TYPES
    media_type = _served_type(ref.mime_type)
    disposition = f"{'inline' if inline else 'attachment'}; filename*=UTF-8''{quote(ref.name, safe='')}"
    return Response(content=data, media_type=media_type, headers={**_FILE_HEADERS, "Content-Disposition": disposition})


def _served_type(declared: str) -> str:
    if mime_problem(declared) is not None:  # never a header of its own making
        return "application/octet-stream"
    kind = declared.split(";", 1)[0].strip().lower()
    if any(word in kind for word in _ACTIVE):
        return "application/octet-stream"
    return kind
