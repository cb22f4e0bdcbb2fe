"""Snapshot names and which snapshots to keep (pure functions, tested as a table).

A snapshot is named by the UTC time its run started: `20261202T115300Z`. On the target:

    <name>.partial/   rsync is (or was, when interrupted) writing it; the next run resumes it
    <name>.sha256     the manifest, written once rsync has succeeded
    <name>/           complete: renamed from .partial only after the manifest is in place
"""

from __future__ import annotations

from datetime import UTC, datetime

NAME_FORMAT = "%Y%m%dT%H%M%SZ"
PARTIAL = ".partial"
MANIFEST = ".sha256"


def snapshot_name(when: datetime) -> str:
    return when.astimezone(UTC).strftime(NAME_FORMAT)


def parse_name(name: str) -> datetime | None:
    try:
        return datetime.strptime(name, NAME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def classify(entries: list[str]) -> tuple[list[str], list[str]]:
    """(complete, partial) snapshot names, oldest first, from a target's directory listing.
    A directory without its manifest is not complete, whatever its name."""
    names = set(entries)
    complete = [n for n in names if parse_name(n) and n + MANIFEST in names]
    partial = [n.removesuffix(PARTIAL) for n in names if n.endswith(PARTIAL) and parse_name(n[:-8])]
    return sorted(complete), sorted(partial)


def to_keep(complete: list[str], *, daily: int, weekly: int) -> set[str]:
    """The newest snapshot of each of the last `daily` days and `weekly` ISO weeks that have
    one, and always the newest of all."""
    newest_first = sorted(complete, reverse=True)
    keep = set(newest_first[:1])
    days: list[str] = []
    weeks: list[tuple[int, int]] = []
    for name in newest_first:
        when = parse_name(name)
        assert when is not None
        day, week = name[:8], when.isocalendar()[:2]
        if day not in days and len(days) < daily:
            days.append(day)
            keep.add(name)
        if week not in weeks and len(weeks) < weekly:
            weeks.append(week)
            keep.add(name)
    return keep
