"""How a value reads in text people see (CLI output, messages): one formatter for all.

Numbers as they are written by hand (2147483647, 0.001, 1e-08; never 2.14748e+09),
mappings as `key=value` pairs and lists comma-separated, never as Python reprs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Whole floats below this print without ".0"; above it their digits are not all exact.
EXACT_FLOAT_INTEGERS = 2**53


def format_number(value: float) -> str:
    """An int as its digits, a float as the shortest text that reads back as the same
    number (whole ones without a trailing .0)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < EXACT_FLOAT_INTEGERS:
        return str(int(value))
    return repr(value)  # the shortest round-tripping form: 0.1, 1e-08, inf, nan


def format_value(value: Any) -> str:
    """`value` for a line of text: None as "-", booleans as true/false, numbers by
    format_number, a mapping as `key=value, key=value`, a list comma-separated (an empty
    one as "-")."""
    if value is None:
        return "-"
    if isinstance(value, bool | int | float):
        return format_number(value)
    if isinstance(value, Mapping):
        pairs = [f"{key}={format_value(item)}" for key, item in value.items()]
        return ", ".join(pairs) or "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(format_value(item) for item in value) or "-"
    return str(value)
