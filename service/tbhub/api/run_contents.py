"""/api/v1/projects/<p>/runs/<id>/contents: a run's files for those who may read the run.

    GET        .../contents          every file with its size in bytes and when it changed
    GET, HEAD  .../contents/<path>   one file's bytes (HEAD: its size and validators only),
                                     one `Range` at a time (206, or 416 past the end)

(`.../files/` is the upload protocol's, for writers.) The role is the run's own: viewers
and read tokens up; a share link is for one board and gets nothing here. The file is
opened by descriptor from the project's directory, no symlink followed
(storage/run_files.open_run_file), and always sent as an attachment that no browser
renders as a page.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from email.utils import formatdate
from typing import Annotated

from fastapi import APIRouter, Header, Path, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from tbhub.api.runs import RunId
from tbhub.auth.caller import require_project
from tbhub.core.errors import NotFound
from tbhub.core.models import RetentionState, Role, Run
from tbhub.core.timestamps import Timestamp
from tbhub.core.upload_protocol import MAX_PATH_BYTES
from tbhub.domain.runs import get_run
from tbhub.http.byte_ranges import (
    RANGE_HEADER_MAX,
    ByteRange,
    Unsatisfiable,
    if_range_holds,
    pick_range,
)
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep
from tbhub.http.file_body import FileBody, attachment, download_type
from tbhub.http.http_errors import error_response
from tbhub.storage.reach import within
from tbhub.storage.run_files import OpenedFile, list_run_files, open_run_file

router = APIRouter(prefix="/api/v1/projects/{project}/runs/{run_id}/contents", tags=["runs"])

FilePath = Annotated[
    str,
    Path(max_length=MAX_PATH_BYTES, description="The file's path inside the run, as listed"),
]
RangeHeader = Annotated[
    str | None,
    Header(
        alias="Range",
        max_length=RANGE_HEADER_MAX,
        description="One range: `bytes=0-1023`, `bytes=1024-` or `bytes=-1024`",
    ),
]
IfRangeHeader = Annotated[
    str | None,
    Header(
        alias="If-Range",
        max_length=RANGE_HEADER_MAX,
        description="The ETag (or Last-Modified) of the copy a resumed download began with",
    ),
]
LIST_LIMIT = 500
_BINARY = {"schema": {"type": "string", "format": "binary"}}
# application/octet-stream, or plain text for the suffixes http/file_body.download_type names
BYTES = {"application/octet-stream": _BINARY, "text/plain": _BINARY, "application/json": _BINARY}
DOWNLOAD = {
    200: {"description": "The whole file", "content": BYTES},
    206: {"description": "The one range asked for, with Content-Range", "content": BYTES},
    400: {"description": "A path that could leave the run, a symlink, a directory"},
    404: {"description": "No such file in the run (or the run is trashed)"},
    416: {"description": "A range that starts past the end; Content-Range: bytes */<size>"},
}


class ContentOut(BaseModel):
    path: str = Field(description="Inside the run, '/'-separated")
    bytes: int
    modified: Timestamp


class ContentsOut(BaseModel):
    files: list[ContentOut]
    truncated: bool = Field(description=f"More than the first {LIST_LIMIT} files exist")


def _readable_run(
    context: ContextDep, caller: CallerDep, session: SessionDep, project: str, run_id: int
) -> Run:
    access = require_project(context.access, caller, project, Role.viewer)
    run = get_run(session, project_id=access.project_id, run_id=run_id)
    if run.retention_state != RetentionState.present:
        raise NotFound(
            f"run {run_id} is {run.retention_state.value}, so its files are not on the "
            "storage; an operator can bring it back with `tbhub admin trash restore`"
        )
    return run


@router.get("", response_model=ContentsOut, summary="Every file of the run and its size")
def list_contents(
    project: ProjectInPath,
    run_id: RunId,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
) -> ContentsOut:
    run = _readable_run(context, caller, session, project, run_id)
    storage = context.settings.storage
    files, more = within(
        project, lambda: list_run_files(storage, project, run.path, limit=LIST_LIMIT)
    )
    return ContentsOut(
        files=[
            ContentOut(path=f.path, bytes=f.bytes, modified=datetime.fromtimestamp(f.mtime, UTC))
            for f in files
        ],
        truncated=more,
    )


@router.head(
    "/{path:path}",
    response_class=Response,  # headers only
    responses=DOWNLOAD,  # type: ignore[arg-type]
    summary="One file's size, ETag and Last-Modified, before downloading it",
)
@router.get(
    "/{path:path}",
    response_class=Response,
    responses=DOWNLOAD,  # type: ignore[arg-type]
    summary="Download one file of the run (Range: one range)",
)
async def download_file(
    request: Request,
    project: ProjectInPath,
    run_id: RunId,
    path: FilePath,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
    range_: RangeHeader = None,
    if_range: IfRangeHeader = None,
) -> Response:
    run = await run_in_threadpool(_readable_run, context, caller, session, project, run_id)
    storage = context.settings.storage
    opened = await run_in_threadpool(
        lambda: within(
            project,
            lambda: open_run_file(storage, project, run.path, path),
            discard=lambda late: os.close(late.fd),
        )
    )
    try:
        return _answer(request, opened, path, range_, if_range)
    except BaseException:
        FileBody.close_unsent(opened.fd)
        raise


def _answer(
    request: Request, opened: OpenedFile, path: str, range_: str | None, if_range: str | None
) -> Response:
    etag = f'"{opened.inode:x}-{opened.size:x}-{opened.mtime_ns:x}"'
    last_modified = formatdate(opened.mtime_ns / 1e9, usegmt=True)
    headers = {
        "ETag": etag,
        "Last-Modified": last_modified,
        "Accept-Ranges": "bytes",
        "Content-Disposition": attachment(path.rsplit("/", 1)[-1]),
        "Cache-Control": "private, no-cache",
        # Never a page, even if a browser is told to show it: no script, no plugin, nothing.
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "X-Content-Type-Options": "nosniff",
    }
    chosen: ByteRange | None = None
    if if_range_holds(if_range, etag=etag, last_modified=last_modified):
        try:
            chosen = pick_range(range_, opened.size)
        except Unsatisfiable:
            FileBody.close_unsent(opened.fd)
            return error_response(
                request,
                416,
                "range_not_satisfiable",
                f"the file has {opened.size} bytes, so the range {range_!r} holds none of "
                "them; ask for a range that starts before the end, or for the whole file",
                headers={"Content-Range": f"bytes */{opened.size}", **headers},
            )
    if chosen is None:
        chosen, status = ByteRange(0, opened.size - 1), 200
    else:
        status = 206
        headers["Content-Range"] = chosen.content_range(opened.size)
    return FileBody(
        opened.fd,
        start=chosen.start,
        length=chosen.length,
        status_code=status,
        headers=headers,
        media_type=download_type(path),
        send_body=request.method != "HEAD",
    )
