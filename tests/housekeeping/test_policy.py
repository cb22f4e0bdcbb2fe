"""The retention plan as a table: pure function of runs, policy, pins and the clock."""

from __future__ import annotations

import pytest

from tbhub.core.errors import InvalidInput
from tbhub.domain.retention_policy import Policy, check_overrides, merge, plan_project
from tbhub.storage.scan import RunInfo

NOW = 1_800_000_000.0
DAY = 86400.0


def runs(*spec: tuple[str, float, int]) -> list[RunInfo]:
    """(path, age in days, bytes) each."""
    return [RunInfo("p", path, size, 1, NOW - age * DAY) for path, age, size in spec]


def removed(policy: Policy, items: list[RunInfo], pinned: frozenset[str] = frozenset()) -> dict:
    plan = plan_project("p", items, policy, pinned=set(pinned), now=NOW)
    return {d.run.path: d.reasons for d in plan.remove}


SAMPLE = runs(("a", 1, 10), ("b", 10, 10), ("c", 40, 10), ("d", 100, 10))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (Policy(), {}),
        (Policy(max_age_days=30), {"c": ("max_age",), "d": ("max_age",)}),
        (Policy(keep_last=3), {"d": ("keep_last",)}),
        (Policy(max_age_days=30, keep_last=3), {"c": ("max_age",), "d": ("max_age", "keep_last")}),
        (Policy(max_project_bytes=25), {"d": ("quota",), "c": ("quota",)}),
        (Policy(max_project_bytes=25, max_age_days=50), {"d": ("max_age",), "c": ("quota",)}),
        (Policy(max_age_days=0, keep_last=0, max_project_bytes=0), {}),
    ],
    ids=["no-limits", "age", "keep-last", "age+keep", "quota", "quota-after-age", "zeros-off"],
)
def test_limits_remove_what_they_say(policy: Policy, expected: dict) -> None:
    assert removed(policy, SAMPLE) == expected


def test_pinned_runs_are_never_removed_but_count_towards_the_quota() -> None:
    plan = plan_project("p", SAMPLE, Policy(max_project_bytes=25), pinned={"d"}, now=NOW)
    assert {d.run.path for d in plan.remove} == {"c", "b"}
    assert plan.skipped_pinned == 0  # d was never chosen: quota takes unpinned runs
    plan = plan_project("p", SAMPLE, Policy(max_age_days=30), pinned={"d"}, now=NOW)
    assert {d.run.path for d in plan.remove} == {"c"}
    assert plan.skipped_pinned == 1


def test_active_runs_are_skipped() -> None:
    items = runs(("old-but-active", 0.001, 10), ("old", 50, 10))
    plan = plan_project("p", items, Policy(keep_last=1, active_minutes=60), pinned=set(), now=NOW)
    assert [d.run.path for d in plan.remove] == ["old"]
    plan = plan_project("p", items, Policy(max_age_days=0.0001, active_minutes=60), pinned=set(),
                        now=NOW)  # fmt: skip
    assert [d.run.path for d in plan.remove] == ["old"]
    assert plan.skipped_active == 1


def test_plan_lists_oldest_first_with_counts_and_bytes() -> None:
    plan = plan_project("p", SAMPLE, Policy(max_age_days=5), pinned=set(), now=NOW)
    assert [d.run.path for d in plan.remove] == ["d", "c", "b"]
    assert (plan.remove_bytes, plan.kept_runs, plan.kept_bytes) == (30, 1, 10)


def test_overrides_replace_defaults_and_none_inherits() -> None:
    default = Policy(max_age_days=30, keep_last=5)
    merged = merge(default, {"max_age_days": 0, "keep_last": None, "action": "archive"})
    assert merged == Policy(max_age_days=0, keep_last=5, action="archive")


@pytest.mark.parametrize(
    "bad",
    [{"action": "delete"}, {"keep_last": -1}, {"keep_last": 1.5}, {"max_age_days": "x"},
     {"colour": 1}, {"keep_last": True}],
)  # fmt: skip
def test_bad_overrides_are_refused_by_name(bad: dict) -> None:
    with pytest.raises(InvalidInput) as info:
        check_overrides(bad)
    assert next(iter(bad)) in info.value.message or "unknown" in info.value.message
