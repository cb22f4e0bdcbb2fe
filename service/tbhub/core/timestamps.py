"""The one way tbhub writes a moment for people and programs: ISO 8601 in UTC, to the second,
with `Z` (2026-12-03T10:15:00Z). The API's JSON, the CLI's `--json` and its tables all use it.

Filters that take a time (`since`) compare with `>=`, so a client that passes back a time it
read here sees that second again rather than missing anything in it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, overload

from pydantic import PlainSerializer, WithJsonSchema

from tbhub.core.errors import InvalidInput

PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"
EXAMPLE = "2026-12-03T10:15:00Z"


@overload
def iso_utc(moment: datetime | float) -> str: ...
@overload
def iso_utc(moment: None) -> None: ...
def iso_utc(moment: datetime | float | None) -> str | None:
    """A datetime (it must carry a time zone) or epoch seconds as 2026-12-03T10:15:00Z; None
    stays None."""
    if moment is None:
        return None
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, UTC)
    elif moment.tzinfo is None:
        # Every column is UTCDateTime (aware); a naive one here is a bug, not local time.
        raise ValueError(f"naive datetime {moment!r}: give it a time zone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def json_default(value: Any) -> Any:
    """`default=` for json.dumps: datetimes in the one format, anything else as str()."""
    return iso_utc(value) if isinstance(value, datetime) else str(value)


# A datetime field of an API model: validated like any datetime, written as iso_utc() in
# JSON, and declared so in the OpenAPI spec (with the pattern clients can rely on).
Timestamp = Annotated[
    datetime,
    PlainSerializer(iso_utc, return_type=str, when_used="json"),
    WithJsonSchema(
        {"type": "string", "format": "date-time", "pattern": PATTERN, "examples": [EXAMPLE]},
        mode="serialization",
    ),
]


def parse_moment(field: str, value: str | None) -> datetime | None:
    """A filter's time (`since`, `until`): ISO 8601 with a time zone; None stays None."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidInput(f"{field}: {value[:60]!r} is not an ISO 8601 time with a time zone, "
                           "e.g. 2026-01-31T12:00Z")  # fmt: skip
    return moment
