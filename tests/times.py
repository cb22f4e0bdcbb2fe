"""Finding every time in a JSON document, to check that each is in the one format."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tbhub.core.timestamps import PATTERN

STARTS_WITH_A_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def dated_strings(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(where, string) for every string in a JSON document that starts with a date."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from dated_strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from dated_strings(item, f"{where}[{index}]")
    elif isinstance(value, str) and STARTS_WITH_A_DATE.match(value):
        yield where, value


def assert_one_format(document: Any, expected: set[str]) -> None:
    """Every time in the document is in the one format, and the ones named are there."""
    found = dict(dated_strings(document))
    wrong = {where: text for where, text in found.items() if not re.fullmatch(PATTERN, text)}
    assert wrong == {}
    keys = {where.rsplit(".", 1)[-1] for where in found}
    assert expected <= keys, f"no {expected - keys} in {document}"
