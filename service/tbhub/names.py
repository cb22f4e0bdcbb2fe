"""Validation of the names people choose: project slugs and user names."""

from __future__ import annotations

import re

from tbhub.errors import InvalidInput

PROJECT_SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
TEAM_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# A compare board's name, also its path /boards/<slug>/: a project slug no project may take.
COMPARE_SLUG = re.compile(r"cmp-[0-9a-f]{12}")


def check_project_name(name: str) -> str:
    if not PROJECT_SLUG.fullmatch(name):
        raise InvalidInput(
            f"project name {name!r} is not a slug: use 1-63 lowercase letters, digits and "
            "dashes, starting with a letter or digit (for example 'vision-2')"
        )
    return name


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
    if not USER_NAME.fullmatch(name):
        raise InvalidInput(
            f"user name {name!r} is not allowed: use 1-64 letters, digits, '.', '_', '@' "
            "or '-', starting with a letter or digit"
        )
    return name


def check_team_name(name: str) -> str:
    if not TEAM_NAME.fullmatch(name):
        raise InvalidInput(
            f"team name {name!r} is not allowed: use 1-64 lowercase letters, digits, '.', '_' "
            "or '-', starting with a letter or digit (for example 'vision-team')"
        )
    return name
