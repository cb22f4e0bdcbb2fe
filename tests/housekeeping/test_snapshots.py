"""Snapshot names, partial vs complete, and which snapshots the daily/weekly rule keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tbhub.housekeeping.snapshots import classify, parse_name, snapshot_name, to_keep


def test_names_are_utc_timestamps_that_sort_by_time() -> None:
    when = datetime(2026, 12, 2, 11, 53, 7, tzinfo=UTC)
    assert snapshot_name(when) == "20261202T115307Z"
    assert parse_name("20261202T115307Z") == when
    assert parse_name("20261202T115307Z.partial") is None


def test_only_a_directory_with_its_manifest_is_complete() -> None:
    entries = ["20260101T000000Z", "20260101T000000Z.sha256", "20260102T000000Z",
               "20260103T000000Z.partial", "lost+found", "20260103T000000Z.sha256.tmp"]  # fmt: skip
    assert classify(entries) == (["20260101T000000Z"], ["20260103T000000Z"])


def daily_series(days: int, per_day: int = 2) -> list[str]:
    start = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday
    return [
        snapshot_name(start + timedelta(days=d, hours=6 * i))
        for d in range(days)
        for i in range(per_day)
    ]


def test_keep_the_newest_of_each_of_n_days_and_m_weeks() -> None:
    names = daily_series(30)
    kept = to_keep(names, daily=3, weekly=2)
    newest_of_day = {n[:8]: n for n in names}  # later names overwrite earlier ones
    assert {newest_of_day["20260130"], newest_of_day["20260129"], newest_of_day["20260128"]} <= kept
    # weeks: 2026-W05 (its newest is the newest overall) and W04, whose newest is Sunday 25th
    assert newest_of_day["20260125"] in kept
    assert len(kept) == 4


def test_the_newest_snapshot_is_always_kept() -> None:
    names = daily_series(3)
    assert to_keep(names, daily=0, weekly=0) == {names[-1]}
