"""The bounds every input gets, matching the column that stores it (models.py).

Request models build their fields from the types here, so a value that the database
cannot hold (a 2,000-character name in a String(255), 2**63 in a BigInteger, infinity in
a Float) is a 422 naming the field, never a 500. Booleans are not numbers: numeric body
fields are strict. The domain checks (jobs/policy.py) use the same limits for the CLI.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

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
