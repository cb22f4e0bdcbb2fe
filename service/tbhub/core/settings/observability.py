"""The observability settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ObservabilitySettings(BaseModel):
    """Observability: the server's log format and its Prometheus metrics."""

    log_format: Literal["text", "json"] = Field(
        default="text",
        description="How `tbhub serve` writes its log: text lines, or json (one JSON object "
        "a line, each with the request id nginx gave the request, the user and the project, "
        "and one access line per request).",
    )
    metrics_enabled: bool = Field(
        default=True,
        description="Count requests, cache lookups, board starts and lags for /metrics. Off, "
        "/metrics keeps only the figures read from the database at scrape time.",
    )
