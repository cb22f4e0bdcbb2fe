"""Jinja2 templates for server-rendered pages, used by web/ pages and by api/ answers
(the board gate's "starting" and error pages)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

from tbhub.core.resources import web_templates
from tbhub.core.timestamps import iso_utc

TEMPLATES = Jinja2Templates(directory=str(web_templates()))
SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def iso(moment: datetime | float | None) -> str:
    """The `iso` filter: a moment (or epoch seconds) in the one format (timestamps.py); ''
    for none."""
    return iso_utc(moment) or ""


def size(count: int | None) -> str:
    """Bytes for people: 0 B, 512 B, 1.5 KiB, 20 MiB, 3.2 GiB."""
    value = float(count or 0)
    for unit in SIZE_UNITS:
        if value < 1024 or unit == SIZE_UNITS[-1]:
            break
        value /= 1024
    if unit == "B":
        return f"{int(value)} B"
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


TEMPLATES.env.filters["iso"] = iso
TEMPLATES.env.filters["size"] = size


def render(
    request: Request, name: str, context: dict[str, Any], *, status_code: int = 200
) -> Response:
    return TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)
