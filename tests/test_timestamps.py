"""iso_utc: the one timestamp format, from aware datetimes and epoch seconds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tbhub.core.timestamps import iso_utc, json_default


def test_an_aware_time_in_another_zone_is_written_in_utc_with_z() -> None:
    berlin = datetime(2026, 12, 3, 11, 15, 0, tzinfo=timezone(timedelta(hours=1)))
    assert iso_utc(berlin) == "2026-12-03T10:15:00Z"


def test_fractions_of_a_second_are_dropped_not_rounded() -> None:
    assert iso_utc(datetime(2026, 12, 3, 10, 15, 59, 999_999, tzinfo=UTC)) == "2026-12-03T10:15:59Z"


def test_epoch_seconds_and_none() -> None:
    assert iso_utc(0.5) == "1970-01-01T00:00:00Z"
    assert iso_utc(1_796_292_900) == "2026-12-03T10:15:00Z"
    assert iso_utc(None) is None


def test_a_naive_datetime_is_refused_rather_than_guessed() -> None:
    with pytest.raises(ValueError, match="naive"):
        iso_utc(datetime(2026, 12, 3, 10, 15))


def test_json_default_writes_datetimes_in_the_one_format_and_the_rest_as_text() -> None:
    moment = datetime(2026, 12, 3, 10, 15, tzinfo=UTC)
    assert json.loads(json.dumps({"at": moment, "path": object}, default=json_default)) == {
        "at": "2026-12-03T10:15:00Z", "path": "<class 'object'>"}  # fmt: skip
