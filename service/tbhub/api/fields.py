"""Bounded request field types: numbers finite and not bools, strings within their column."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, StrictBool, StringConstraints

MAX_INT64 = 2**63 - 1


def _number_not_bool(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number (true/false and strings are not numbers)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be finite (NaN and infinity are refused)")
    return value


def _no_control_characters(value: str) -> str:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("control characters are not allowed")
    return value


FiniteFloat = Annotated[float, BeforeValidator(_number_not_bool), Field(allow_inf_nan=False)]
Int64 = Annotated[int, BeforeValidator(_number_not_bool), Field(ge=-MAX_INT64, le=MAX_INT64)]
PlainStr = Annotated[str, AfterValidator(_no_control_characters)]
Key = Annotated[
    str, StringConstraints(min_length=1, max_length=128), AfterValidator(_no_control_characters)
]
TagStr = Annotated[str, StringConstraints(min_length=1, max_length=64)]
# Hyperparameters keep their type: a bool stays a bool, a number a (finite) number.
HParamValue = (
    StrictBool
    | Annotated[int, Field(strict=True, ge=-MAX_INT64, le=MAX_INT64)]
    | FiniteFloat
    | Annotated[str, StringConstraints(max_length=1024)]
    | None
)
