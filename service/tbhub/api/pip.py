"""/pip/: the tbhub-client wheel and the wheels it needs, as a page for `pip install
--find-links` (client_dist.py). Anyone may read it: it is tbhub's own client, no data."""

from __future__ import annotations

from functools import cache
from pathlib import Path as FsPath
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import FileResponse, HTMLResponse

from tbhub.artifacts.client_dist import PipFiles
from tbhub.core.errors import NotFound
from tbhub.http.deps import ContextDep

router = APIRouter(prefix="/pip", include_in_schema=False)
WheelName = Annotated[str, Path(max_length=200, pattern=r"^[A-Za-z0-9_.+-]+\.whl$")]


@cache
def pip_files(data_dir: FsPath) -> PipFiles:
    return PipFiles(data_dir)


@router.get("/", response_class=HTMLResponse)
def index(context: ContextDep) -> HTMLResponse:
    """Links to every wheel, for `pip install --no-index --find-links <this page>`."""
    return HTMLResponse(pip_files(context.settings.data_dir).page())


@router.get("/{name}", response_class=FileResponse)
def wheel(name: WheelName, context: ContextDep) -> FileResponse:
    path = pip_files(context.settings.data_dir).path(name)
    if path is None:
        raise NotFound(f"no wheel {name} here; the list is at /pip/")
    return FileResponse(path, media_type="application/octet-stream", filename=name)
