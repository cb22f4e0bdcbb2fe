"""What a log line says about the request it was written for, and the JSON-lines format
(TBHUB_LOG_FORMAT=json).

The request middleware (http/request_log.py) opens a `RequestInfo` per request with the id
nginx gave it (X-Request-ID, nginx's `$request_id`, also on nginx's own log line); the
caller's resolution and the auth hook note the user and the project on it as they learn
them. A line logged while the request runs carries them; threads of their own (the
supervisor, the watcher) log with none.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# nginx's $request_id is 32 hex digits; anything else a client or proxy sent is replaced.
REQUEST_ID = re.compile(r"^[A-Za-z0-9-]{8,64}$")


@dataclass
class RequestInfo:
    request_id: str
    user: str | None = None
    user_id: int | None = None
    project: str | None = None


_current: ContextVar[RequestInfo | None] = ContextVar("tbhub_request", default=None)


def begin_request(header: str | None) -> tuple[RequestInfo, Token[RequestInfo | None]]:
    """The request's info, with nginx's id when it sent a well-formed one (else a new one)."""
    request_id = header if header and REQUEST_ID.fullmatch(header) else uuid.uuid4().hex
    info = RequestInfo(request_id)
    return info, _current.set(info)


def end_request(token: Token[RequestInfo | None]) -> None:
    _current.reset(token)


def note_request(
    *, user: str | None = None, user_id: int | None = None, project: str | None = None
) -> None:
    """Tell the running request's log lines who asked and for which project."""
    info = _current.get()
    if info is None:
        return
    if user is not None:
        info.user = user
    if user_id is not None:
        info.user_id = user_id
    if project is not None:
        info.project = project


class JsonLines(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the request's fields, and any
    `extra={"fields": {...}}` the caller passed (the access line's route, status, time)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        info = _current.get()
        if info is not None:
            line.update(request_id=info.request_id, user=info.user, user_id=info.user_id,
                        project=info.project)  # fmt: skip
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(log_format: str) -> None:
    """The root logger's one handler (stderr), in text or JSON lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
