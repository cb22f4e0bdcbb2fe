"""User accounts: keyword-only service functions that hold the queries."""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from tbhub.auth.oidc import Identity
from tbhub.auth.passwords import hash_password, verify_password
from tbhub.auth.user_sessions import end_user_sessions
from tbhub.core.errors import AlreadyExists, Forbidden, NotAuthenticated, NotFound
from tbhub.core.models import User
from tbhub.core.names import check_user_name
from tbhub.domain import audit

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
    refuse_disabled(user)
    return user


def refuse_disabled(user: User) -> None:
    """Told only to someone who proved who they are (a right password, or the provider)."""
    if user.disabled:
        raise NotAuthenticated("this account is disabled; ask an admin of this tbhub to enable it")


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.name)))


def sign_in_with_identity(session: Session, *, identity: Identity) -> User:
    """The account of this (issuer, subject), created at its first sign-in; its email and
    display name follow the provider's at every sign-in. Never matched by email or name."""
    user = session.scalar(
        select(User).where(
            User.oidc_issuer == identity.issuer, User.oidc_subject == identity.subject
        )
    )
    if user is None:
        user = User(
            name=_free_user_name(session, identity),
            password_hash=None,
            is_admin=False,
            oidc_issuer=identity.issuer,
            oidc_subject=identity.subject,
        )
        session.add(user)
        session.flush()
        audit.record(session, actor=user.name, action="user.create", target=user.name,
                     issuer=identity.issuer, subject=identity.subject)  # fmt: skip
    refuse_disabled(user)
    user.email, user.display_name = identity.email, identity.name
    audit.record(session, actor=user.name, action="auth.sign_in", target=user.name,
                 method="oidc")  # fmt: skip
    return user


def _free_user_name(session: Session, identity: Identity) -> str:
    """A user name from the provider's preferred name or email, made unique with a suffix."""
    wanted = identity.preferred_username or (identity.email or "").split("@")[0] or "user"
    base = re.sub(r"[^A-Za-z0-9._@-]", "-", wanted).lstrip("._@-")[:56] or "user"
    taken = set(session.scalars(select(User.name).where(User.name.startswith(base))))
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def refuse_last_admin(session: Session, user: User, what: str) -> None:
    """The last enabled admin cannot be deleted, disabled or made a plain user: nobody could
    manage this tbhub any more (but the CLI on its host)."""
    if not user.is_admin or user.disabled:
        return
    admins = session.scalars(
        select(User.id).where(User.is_admin.is_(True), User.disabled.is_(False))
    ).all()
    if len(admins) == 1:
        raise Forbidden(
            f"{user.name} is the last enabled admin and cannot be {what}; make another admin "
            "first, or nobody could manage this tbhub"
        )


def set_disabled(session: Session, *, name: str, disabled: bool, actor: str) -> User:
    """A disabled account keeps its data and memberships but gets in nowhere: its sessions
    end for good (enabling it again brings none back) at once on pages and the API, and on
    boards within the permission cache's life; its tokens are refused while it is disabled."""
    user = get_user(session, name=name)
    if disabled:
        refuse_last_admin(session, user, "disabled")
        _end_every_session(session, user)
    user.disabled = disabled
    audit.record(session, actor=actor, action="user.disable" if disabled else "user.enable",
                 target=name)  # fmt: skip
    session.flush()
    return user


def end_sessions(session: Session, *, name: str, actor: str) -> User:
    """Sign out everywhere: every session issued so far stops working."""
    user = get_user(session, name=name)
    _end_every_session(session, user)
    audit.record(session, actor=actor, action="user.sign_out_everywhere", target=name)
    session.flush()
    return user


def set_password(session: Session, *, name: str, password: str, actor: str) -> User:
    """A new password also ends every session made with the old one."""
    user = get_user(session, name=name)
    user.password_hash = hash_password(password)
    _end_every_session(session, user)
    audit.record(session, actor=actor, action="user.password", target=name)
    session.flush()
    return user


def _end_every_session(session: Session, user: User) -> None:
    """Every session row of the user goes, and the epoch its cookies (and board cookies,
    and passes) carry moves on."""
    end_user_sessions(session, user_id=user.id)
    user.session_epoch += 1


def delete_user(session: Session, *, name: str, actor: str) -> None:
    """Delete an account: its memberships and team places go, its runs and the audit log's
    record of what it did stay (its sessions and tokens go with it; its id is never given
    to another account). The last enabled admin cannot be deleted."""
    user = get_user(session, name=name)
    refuse_last_admin(session, user, "deleted")
    session.delete(user)
    audit.record(session, actor=actor, action="user.delete", target=name)
    session.flush()


def set_admin(session: Session, *, name: str, is_admin: bool, actor: str) -> User:
    user = get_user(session, name=name)
    if not is_admin:
        refuse_last_admin(session, user, "made a plain user")
    user.is_admin = is_admin
    audit.record(session, actor=actor, action="user.admin", target=name, is_admin=is_admin)
    session.flush()
    return user
