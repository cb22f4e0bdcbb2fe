"""The opaque cursor of a run search page (domain/run_params.search_runs): which segment of
the order the last row came from, its sort value and its run id, as urlsafe base64 of
compact JSON. Checked whole when it comes back: anything else is InvalidInput, never a
crash, and a cursor made for another sort is refused."""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from datetime import datetime

from tbhub.core.errors import InvalidInput

CURSOR_MAX = 2048
ID_MAX = 2**63 - 1
VALUE_MAX = 1024
AGAIN = "start again from the first page (leave out cursor) with the same sort and conditions"


@dataclass(frozen=True)
class SearchCursor:
    """Where the page after the last one starts: after (value, run_id) in `segment`."""

    sort: str  # the sort as written, '-' first when descending
    segment: int
    value: float | str | datetime | None
    run_id: int

    def encode(self) -> str:
        value = self.value.isoformat() if isinstance(self.value, datetime) else self.value
        raw = json.dumps({"s": self.sort, "g": self.segment, "v": value, "i": self.run_id},
                         separators=(",", ":"), ensure_ascii=False)  # fmt: skip
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(text: str, sort: str) -> SearchCursor:
    """The cursor `text` for a search sorted by `sort`, checked (its value's type is checked
    against the segment by the search)."""
    if len(text) > CURSOR_MAX:
        raise InvalidInput(f"cursor is longer than {CURSOR_MAX} characters; {AGAIN}")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        data = json.loads(raw.decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidInput(f"cursor is not one this server made; {AGAIN}") from None
    if not isinstance(data, dict) or set(data) != {"s", "g", "v", "i"}:
        raise InvalidInput(f"cursor is not one this server made; {AGAIN}")
    segment, value, run_id = data["g"], data["v"], data["i"]
    if data["s"] != sort:
        shown = str(data["s"])[:140]
        raise InvalidInput(f"cursor belongs to sort={shown}, not sort={sort}; pass that sort "
                           f"or {AGAIN}")  # fmt: skip
    ints_ok = all(type(n) is int for n in (segment, run_id))
    if not ints_ok or not 0 <= segment <= 2 or not 0 <= run_id <= ID_MAX:
        raise InvalidInput(f"cursor is not one this server made; {AGAIN}")
    if isinstance(value, bool) or not (
        value is None
        or (isinstance(value, int | float) and math.isfinite(value))
        or (isinstance(value, str) and len(value) <= VALUE_MAX)
    ):
        raise InvalidInput(f"cursor is not one this server made; {AGAIN}")
    return SearchCursor(sort, segment, value, run_id)


def bad_cursor() -> InvalidInput:
    """The error of a cursor whose parts do not fit the search's order."""
    return InvalidInput(f"cursor is not one this server made; {AGAIN}")
