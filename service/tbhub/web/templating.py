"""Jinja2 templates for the server-rendered pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


def render(
    request: Request, name: str, context: dict[str, Any], *, status_code: int = 200
) -> Response:
    return TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)
