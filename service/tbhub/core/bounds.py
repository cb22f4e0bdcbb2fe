"""The bounds every input gets, matching the column that stores it (models.py).

Request models build their fields from the types here, so a value that the database
cannot hold (a 2,000-character name in a String(255), 2**63 in a BigInteger, infinity in
a Float) is a 422 naming the field, never a 500. Booleans are not numbers: numeric body
fields are strict. The domain checks (jobs/policy.py) use the same limits for the CLI.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, StrictBool

INT32_MAX = 2**31 - 1  # Integer columns
INT64_MAX = 2**63 - 1  # BigInteger columns
PROJECT_NAME_MAX = 63  # projects.name String(63)
USER_NAME_MAX = 64  # users.name, every actor column String(64)
RUN_PATH_MAX = 1024  # run_path String(1024)
AUDIT_TARGET_MAX = PROJECT_NAME_MAX + 1 + RUN_PATH_MAX  # "<project>/<run path>"
PASSWORD_MAX = 1024  # hashed, so only a sanity bound
TOKEN_MAX = 256  # CSRF tokens and other opaque strings we issue
URL_PATH_MAX = 2048  # a local redirect target
# Float columns hold durations; a century is plenty and keeps them finite.
DAYS_MAX = 36_525.0
MINUTES_MAX = DAYS_MAX * 24 * 60

Count = Annotated[int, Field(strict=True, ge=0, le=INT32_MAX)]
ByteCount = Annotated[int, Field(strict=True, ge=0, le=INT64_MAX)]
Days = Annotated[float, Field(strict=True, ge=0, le=DAYS_MAX, allow_inf_nan=False)]
Minutes = Annotated[float, Field(strict=True, ge=0, le=MINUTES_MAX, allow_inf_nan=False)]
RunPath = Annotated[str, Field(min_length=1, max_length=RUN_PATH_MAX)]

# -- the run registry and API tokens --------------------------------------------------------
FLOAT_MAX = 1e300  # summary metrics and hyperparameters: any finite number a job reports
RUN_NAME_MAX = 100  # runs.name String(128) holds it with room for nothing else
RUN_GROUP_MAX = 255  # runs.group_name String(255)
TAG_MAX = 64  # run_tags.tag String(64)
KEY_MAX = 128  # a hyperparameter or metric name
HPARAM_TEXT_MAX = 1024
SHORT_TEXT_MAX = 255  # git branch, dataset version, host: String(255)
COMMAND_MAX = 8192
NOTES_MAX = 10_000
GIT_COMMIT_MAX = 64  # runs.git_commit String(64): SHA-1 or SHA-256 in hex
TOKEN_NAME_MAX = 64  # api_tokens.name String(64)


def _no_control_characters(value: str) -> str:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("control characters are not allowed")
    return value


FiniteFloat = Annotated[float, Field(strict=True, ge=-FLOAT_MAX, le=FLOAT_MAX, allow_inf_nan=False)]
SignedInt64 = Annotated[int, Field(strict=True, ge=-INT64_MAX, le=INT64_MAX)]
Id = Annotated[int, Field(strict=True, ge=1, le=INT64_MAX)]


NoControls = AfterValidator(_no_control_characters)
RunName = Annotated[str, Field(min_length=1, max_length=RUN_NAME_MAX), NoControls]
GroupName = Annotated[str, Field(max_length=RUN_GROUP_MAX), NoControls]
ShortText = Annotated[str, Field(max_length=SHORT_TEXT_MAX), NoControls]
MetricName = Annotated[str, Field(min_length=1, max_length=KEY_MAX), NoControls]
TokenName = Annotated[str, Field(min_length=1, max_length=TOKEN_NAME_MAX), NoControls]
Tag = Annotated[str, Field(min_length=1, max_length=TAG_MAX)]
Command = Annotated[str, Field(max_length=COMMAND_MAX)]
Notes = Annotated[str, Field(max_length=NOTES_MAX)]
GitCommit = Annotated[str, Field(pattern=r"^[0-9a-fA-F]{4,64}$", max_length=GIT_COMMIT_MAX)]
# Hyperparameters keep their type: a bool stays a bool, a number a finite number.
HParamValue = (
    StrictBool
    | SignedInt64
    | FiniteFloat
    | Annotated[str, Field(max_length=HPARAM_TEXT_MAX)]
    | None
)
