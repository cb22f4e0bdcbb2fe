"""Validation of what people type: the names they choose (project slugs, user, team and
token names) and the fixed words they choose from (roles, scopes, statuses)."""

from __future__ import annotations

import enum
import re
from typing import TypeVar

from tbhub.core.errors import InvalidInput

E = TypeVar("E", bound=enum.Enum)

PROJECT_SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
TEAM_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# A compare board's name, also its path /boards/<slug>/: a project slug no project may take.
COMPARE_SLUG = re.compile(r"cmp-[0-9a-f]{12}")


def checked_name(pattern: re.Pattern[str], name: str, what: str, rule: str) -> str:
    """`name` when the whole of it matches `pattern`; otherwise InvalidInput: the `what`
    name, then the `rule` it breaks."""
    if not pattern.fullmatch(name):
        raise InvalidInput(f"{what} name {name!r} {rule}")
    return name


def one_of(kind: type[E], value: str, what: str) -> E:
    """`value` as a member of the enum `kind`; otherwise InvalidInput listing the members."""
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(str(member.value) for member in kind)
        raise InvalidInput(f"{what} {value!r} is not one of: {known}") from None


def check_project_name(name: str) -> str:
    return checked_name(
        PROJECT_SLUG, name, "project", "is not a slug: use 1-63 lowercase letters, digits and "
        "dashes, starting with a letter or digit (for example 'vision-2')",
    )  # fmt: skip


def check_new_project_name(name: str) -> str:
    """A name for a new project: a slug that is not the shape of a compare board's name."""
    check_project_name(name)
    if COMPARE_SLUG.fullmatch(name):
        raise InvalidInput(
            f"project name {name!r} has the shape of a compare board's name ('cmp-' and 12 "
            "hex digits), which tbhub keeps for those; choose another name"
        )
    return name


def is_compare_slug(name: str) -> bool:
    return COMPARE_SLUG.fullmatch(name) is not None


def check_user_name(name: str) -> str:
    return checked_name(
        USER_NAME, name, "user", "is not allowed: use 1-64 letters, digits, '.', '_', '@' "
        "or '-', starting with a letter or digit",
    )  # fmt: skip


def check_team_name(name: str) -> str:
    return checked_name(
        TEAM_NAME, name, "team", "is not allowed: use 1-64 lowercase letters, digits, '.', '_' "
        "or '-', starting with a letter or digit (for example 'vision-team')",
    )  # fmt: skip
