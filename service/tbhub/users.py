"""User accounts: keyword-only service functions that hold the queries."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from tbhub import audit
from tbhub.auth.passwords import hash_password, verify_password
from tbhub.errors import AlreadyExists, NotAuthenticated, NotFound
from tbhub.models import User
from tbhub.names import check_user_name

WRONG_CREDENTIALS = "wrong user name or password; check both and try again"


def create_user(
    session: Session, *, name: str, password: str | None, is_admin: bool, actor: str
) -> User:
    check_user_name(name)
    if session.scalar(select(User).where(User.name == name)) is not None:
        raise AlreadyExists(f"user {name!r} already exists; pick another name")
    user = User(
        name=name,
        password_hash=hash_password(password) if password is not None else None,
        is_admin=is_admin,
    )
    session.add(user)
    session.flush()
    audit.record(session, actor=actor, action="user.create", target=name, is_admin=is_admin)
    return user


def get_user(session: Session, *, name: str) -> User:
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFound(f"no user named {name!r}; list users with `tbhub admin user list`")
    return user


def authenticate(session: Session, *, name: str, password: str) -> User:
    """The user, or one generic error whether the name or the password was wrong."""
    user = session.scalar(select(User).where(User.name == name))
    if not verify_password(user.password_hash if user else None, password):
        raise NotAuthenticated(WRONG_CREDENTIALS)
    assert user is not None
    return user


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.name)))
