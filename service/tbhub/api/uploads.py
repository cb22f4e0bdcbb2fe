"""/api/v1/projects/<p>/runs/<id>/files/<path>: resumable uploads into a run's directory.

    GET   .../files/          every file of the run with the offset the server holds
    HEAD  .../files/<path>    Upload-Offset and Upload-Complete of one file
    GET   .../files/<path>    the same as JSON
    PATCH .../files/<path>    append a chunk at Upload-Offset, checked by Content-Digest
    PUT   .../files/<path>    a whole file in one request (offset 0, complete)
    POST  .../files/          many whole files in one request: a tar body (small files)

The caller needs the editor role or a write token for the project. The body is read only
after that check and never more than TBHUB_UPLOAD_MAX_CHUNK_BYTES of it; the database is used
only for that check, before the body, so a slow upload holds no database connection.
storage/uploads.py says how files stay whole for the board; storage/receive.py how a lost or
hung network mount is answered (503 `storage_unavailable`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Path, Request, Security
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.convertors import PathConvertor, register_url_convertor

from tbhub.api.runs import RunId
from tbhub.auth.caller import require_project
from tbhub.core.errors import AlreadyExists, BadRequest, OffsetMismatch, TooLarge
from tbhub.core.models import RetentionState, Role
from tbhub.core.upload_protocol import (
    BATCH_TYPE,
    COMPLETE_HEADER,
    MAX_PATH_BYTES,
    OFFSET_HEADER,
    check_upload_path,
    expected_sha256,
    parse_complete,
    parse_offset,
)
from tbhub.domain.runs import get_run
from tbhub.housekeeping.retention import load_policies
from tbhub.http.deps import (
    AppContext,
    ContextDep,
    ProjectInPath,
    bearer_scheme,
    cookie_scheme,
    get_optional_caller,
    known_caller,
)
from tbhub.http.http_errors import error_response
from tbhub.storage import receive
from tbhub.storage.receive import UploadTarget
from tbhub.storage.uploads import FileState


class AnyPathConvertor(PathConvertor):
    """Like `path`, but also matching a decoded control character, so `%0a` gets the 400
    every bad path gets instead of a 404."""

    regex = r"[\s\S]*"


register_url_convertor("uploadpath", AnyPathConvertor())

router = APIRouter(
    prefix="/api/v1/projects/{project}/runs/{run_id}/files",
    tags=["uploads"],
    # The check itself runs in `_target`, before the body is read; these declare it.
    dependencies=[Security(bearer_scheme), Security(cookie_scheme)],
)

FilePath = Annotated[
    str,
    Path(
        max_length=MAX_PATH_BYTES,
        description="The file's path inside the run, '/'-separated; no '..', '.', empty "
        "parts, backslashes, '%', control characters or a leading '/'",
    ),
]
OffsetHeader = Annotated[
    str | None,
    Header(
        alias=OFFSET_HEADER,
        max_length=19,
        description="Byte offset of the chunk in the file (PATCH)",
    ),
]
DigestHeader = Annotated[
    str | None,
    Header(
        alias="Content-Digest",
        max_length=512,
        description="`sha-256=:<base64 of the body's SHA-256>:` (RFC 9530)",
    ),
]
CompleteHeader = Annotated[
    str | None,
    Header(
        alias=COMPLETE_HEADER,
        max_length=2,
        description="`?1`: this chunk ends the file (non-event files are then renamed into "
        "place); `?0` or absent: more follows",
    ),
]
STATE_HEADERS = {
    OFFSET_HEADER: {"description": "Bytes of the file the server holds: send from here",
                    "schema": {"type": "integer", "minimum": 0}},
    COMPLETE_HEADER: {"description": "`?1` once a non-event file is whole under its name",
                      "schema": {"type": "string", "enum": ["?0", "?1"]}},
}  # fmt: skip
UNAVAILABLE = {
    503: {
        "description": "The project's storage is not answering (a lost or hung network "
        "mount): `storage_unavailable`; run the upload again once it is back, it resumes"
    }
}
STATE = {200: {"description": "The file's state", "headers": STATE_HEADERS}, **UNAVAILABLE}
ERRORS = {
    **STATE,
    400: {
        "description": "A path that could leave the run, a name too long (`name_too_long`), "
        "or a chunk that fails its digest"
    },
    409: {
        "description": "The chunk does not start where the file ends",
        "headers": {OFFSET_HEADER: STATE_HEADERS[OFFSET_HEADER]},
    },
    413: {"description": "A body over TBHUB_UPLOAD_MAX_CHUNK_BYTES"},
    507: {"description": "The project is over its retention quota, or the storage is full"},
}
CHUNK_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}

BATCH_BODY = {
    "requestBody": {
        "required": True,
        "content": {BATCH_TYPE: {"schema": {"type": "string", "format": "binary"}}},
    }
}


class FileOut(BaseModel):
    path: str
    offset: int
    complete: bool
    kind: Literal["events", "file"]


class FilesOut(BaseModel):
    files: list[FileOut]


def _target(request: Request, context: AppContext, project: str, run_id: int) -> UploadTarget:
    """Who may upload, into which run and within which limits: a short database visit."""
    with context.factory() as session:
        caller = known_caller(get_optional_caller(request, context))
        access = require_project(context.access, caller, project, Role.editor)
        run = get_run(session, project_id=access.project_id, run_id=run_id)
        if run.retention_state != RetentionState.present:
            raise AlreadyExists(
                f"run {run_id} is {run.retention_state.value} by retention; restore it "
                "(`tbhub admin trash restore`) or register a new run"
            )
        policy = load_policies(session, context.settings, project=project)[0].policy
        return UploadTarget(
            storage_root=context.settings.storage,
            project=project,
            run_path=run.path,
            quota=policy.max_project_bytes,
            min_free=context.settings.upload_min_free_bytes,
            usage=context.usage,
        )


def _out(state: FileState) -> JSONResponse:
    return JSONResponse(state.as_json(), headers=_headers(state))


def _files_out(states: list[FileState]) -> FilesOut:
    return FilesOut(files=[FileOut(**state.as_json()) for state in states])  # type: ignore[arg-type]


def _headers(state: FileState) -> dict[str, str]:
    return {OFFSET_HEADER: str(state.offset), COMPLETE_HEADER: "?1" if state.complete else "?0"}


@router.get(
    "/",
    response_model=FilesOut,
    responses=UNAVAILABLE,  # type: ignore[arg-type]
    summary="Every file of the run and its offset",
)
async def list_run_files(
    request: Request, context: ContextDep, project: ProjectInPath, run_id: RunId
) -> FilesOut:
    target = await run_in_threadpool(_target, request, context, project, run_id)
    files = await run_in_threadpool(receive.list_files, target)
    return _files_out(files)


@router.head(
    "/{path:uploadpath}",
    response_class=Response,  # headers only: no body, no media type
    responses=STATE,  # type: ignore[arg-type]
    summary="How much of a file the server holds (headers only)",
)
async def head_file(
    request: Request, context: ContextDep, project: ProjectInPath, run_id: RunId, path: FilePath
) -> Response:
    state = await _state(request, context, project, run_id, path)
    return Response(headers=_headers(state))


@router.get(
    "/{path:uploadpath}",
    response_model=FileOut,
    responses=STATE,  # type: ignore[arg-type]
    summary="How much of a file the server holds",
)
async def get_file(
    request: Request, context: ContextDep, project: ProjectInPath, run_id: RunId, path: FilePath
) -> Response:
    return _out(await _state(request, context, project, run_id, path))


async def _state(
    request: Request, context: AppContext, project: str, run_id: int, path: str
) -> FileState:
    target = await run_in_threadpool(_target, request, context, project, run_id)
    return await run_in_threadpool(receive.file_state, target, check_upload_path(path))


@router.patch(
    "/{path:uploadpath}",
    response_model=FileOut,
    responses=ERRORS,  # type: ignore[arg-type]
    openapi_extra=CHUNK_BODY,
    summary="Append a chunk at Upload-Offset (a retry of a chunk already held succeeds)",
)
async def append_chunk(
    request: Request,
    context: ContextDep,
    project: ProjectInPath,
    run_id: RunId,
    path: FilePath,
    upload_offset: OffsetHeader = None,
    content_digest: DigestHeader = None,
    upload_complete: CompleteHeader = None,
) -> Response:
    return await _receive(
        request, context, project, run_id, path,
        offset=parse_offset(upload_offset),
        digest=content_digest,
        complete=parse_complete(upload_complete),
    )  # fmt: skip


@router.put(
    "/{path:uploadpath}",
    response_model=FileOut,
    responses=ERRORS,  # type: ignore[arg-type]
    openapi_extra=CHUNK_BODY,
    summary="Upload a whole file in one request (PATCH at offset 0 that completes it)",
)
async def put_file(
    request: Request,
    context: ContextDep,
    project: ProjectInPath,
    run_id: RunId,
    path: FilePath,
    content_digest: DigestHeader = None,
) -> Response:
    return await _receive(
        request, context, project, run_id, path, offset=0, digest=content_digest, complete=True
    )


@router.post(
    "/",
    response_model=FilesOut,
    responses=ERRORS,  # type: ignore[arg-type]
    openapi_extra=BATCH_BODY,
    summary="Upload many whole files in one request: a tar of them, each written as a PUT",
)
async def upload_batch(
    request: Request,
    context: ContextDep,
    project: ProjectInPath,
    run_id: RunId,
    content_digest: DigestHeader = None,
) -> FilesOut:
    target = await run_in_threadpool(_target, request, context, project, run_id)
    if request.headers.get("content-type", "").split(";")[0].strip() != BATCH_TYPE:
        raise BadRequest(f"send a batch as `Content-Type: {BATCH_TYPE}`, a tar of whole files")
    sha256 = expected_sha256(content_digest)
    body = b"".join(await _read_body(request, context.settings.upload_max_chunk_bytes))
    states = await run_in_threadpool(receive.receive_batch, target, body, sha256=sha256)
    return _files_out(states)


async def _receive(
    request: Request,
    context: AppContext,
    project: str,
    run_id: int,
    path: str,
    *,
    offset: int,
    digest: str | None,
    complete: bool,
) -> Response:
    target = await run_in_threadpool(_target, request, context, project, run_id)
    parts = check_upload_path(path)
    sha256 = expected_sha256(digest)
    pieces = await _read_body(request, context.settings.upload_max_chunk_bytes)
    try:
        state = await run_in_threadpool(
            receive.receive_chunk, target, parts,
            offset=offset, pieces=pieces, sha256=sha256, complete=complete,
        )  # fmt: skip
    except OffsetMismatch as exc:
        return error_response(
            request, exc.http_status, exc.code, exc.message, {OFFSET_HEADER: str(exc.offset)}
        )
    return _out(state)


async def _read_body(request: Request, limit: int) -> list[bytes]:
    """The body as the pieces it arrived in, refused with 413 as soon as it is known to pass
    `limit` bytes. Not joined here: an 8 MiB join is a copy into fresh memory under the
    GIL on the event loop every request shares; the worker thread puts the pieces together
    (storage/receive.py), for a checkpoint's chunk straight into its reused aligned buffer."""
    declared = request.headers.get("content-length")
    if declared is not None and not (declared.isascii() and declared.isdigit()):
        raise BadRequest("Content-Length must be a number of bytes")
    if declared is not None and int(declared) > limit:
        raise TooLarge(_too_large(limit))
    pieces, size = [], 0
    async for piece in request.stream():
        size += len(piece)
        if size > limit:
            raise TooLarge(_too_large(limit))
        pieces.append(piece)
    return pieces


def _too_large(limit: int) -> str:
    return f"an upload request may carry at most {limit} bytes; send the file in smaller chunks"
