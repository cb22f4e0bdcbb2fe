"""Local password accounts, hashed with argon2id."""

from __future__ import annotations

import functools

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from tbhub.core.errors import InvalidInput

_hasher = PasswordHasher()
MIN_PASSWORD_LENGTH = 8


@functools.cache
def _dummy_hash() -> str:
    """Checked when the user does not exist, so a wrong name costs as long as a wrong password."""
    return _hasher.hash("tbhub-dummy-password-for-timing")


def hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(f"password is too short: use at least {MIN_PASSWORD_LENGTH} characters")
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    try:
        return (
            _hasher.verify(password_hash or _dummy_hash(), password) and password_hash is not None
        )
    except (VerificationError, InvalidHashError):
        return False
