"""Jinja2 templates for server-rendered pages, used by web/ pages and by api/ answers
(the board gate's "starting" and error pages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "web" / "templates"))


def render(
    request: Request, name: str, context: dict[str, Any], *, status_code: int = 200
) -> Response:
    return TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)
