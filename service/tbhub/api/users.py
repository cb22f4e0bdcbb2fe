"""/api/v1/users (instance admins) and /api/v1/me (everyone, for themselves): the account
lifecycle over the API, as `tbhub admin user ...` does it in the CLI."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from tbhub.auth.caller import require_admin as require_admin_caller
from tbhub.auth.passwords import verify_password
from tbhub.core.bounds import PASSWORD_MAX, USER_NAME_MAX
from tbhub.core.errors import Forbidden, InvalidInput, NotAuthenticated
from tbhub.core.models import User
from tbhub.domain import users
from tbhub.http.deps import (
    CallerDep,
    ContextDep,
    CurrentUser,
    SessionDep,
    UserNameInPath,
    set_session_cookie,
)

router = APIRouter(prefix="/api/v1", tags=["users"])


def require_admin(user: User) -> None:
    if not user.is_admin:
        raise Forbidden("only instance admins manage accounts")


def describe(user: User) -> dict[str, Any]:
    return {"name": user.name, "is_admin": user.is_admin, "disabled": user.disabled,
            "email": user.email, "oidc": user.oidc_subject is not None}  # fmt: skip


class NewUser(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=USER_NAME_MAX)
    password: str = Field(min_length=1, max_length=PASSWORD_MAX)
    is_admin: StrictBool = False  # true or false only: never "yes" or 1


class UserPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    disabled: StrictBool | None = None
    is_admin: StrictBool | None = None


class PasswordChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    current_password: str = Field(max_length=PASSWORD_MAX)
    new_password: str = Field(max_length=PASSWORD_MAX)


@router.get("/users")
def list_users(user: CurrentUser, session: SessionDep) -> dict[str, Any]:
    require_admin(user)
    return {"users": [describe(u) for u in users.list_users(session)]}


@router.post("/users", status_code=201)
def create_user(body: NewUser, caller: CallerDep, session: SessionDep) -> dict[str, Any]:
    """Create a local account (as `tbhub admin user create` does)."""
    require_admin_caller(caller, "create accounts")
    user = users.create_user(session, name=body.name, password=body.password,
                             is_admin=body.is_admin, actor=caller.name)  # fmt: skip
    return describe(user)


@router.patch("/users/{name}")
def patch_user(
    name: UserNameInPath, body: UserPatch, user: CurrentUser, session: SessionDep,
    context: ContextDep,
) -> dict[str, Any]:  # fmt: skip
    """Disable or enable an account (its sessions end at once), or make it an admin."""
    require_admin(user)
    if body.disabled is not None:
        users.set_disabled(session, name=name, disabled=body.disabled, actor=user.name)
    if body.is_admin is not None:
        users.set_admin(session, name=name, is_admin=body.is_admin, actor=user.name)
    context.forget_identities(after=session)
    return describe(users.get_user(session, name=name))


@router.delete("/users/{name}", status_code=204)
def delete_user(
    name: UserNameInPath, user: CurrentUser, session: SessionDep, context: ContextDep
) -> None:
    """Delete an account; its runs stay (they are files of their projects)."""
    require_admin(user)
    users.delete_user(session, name=name, actor=user.name)
    context.forget_identities(after=session)


@router.post("/users/{name}/sign-out-everywhere", status_code=204)
def end_user_sessions(
    name: UserNameInPath, user: CurrentUser, session: SessionDep, context: ContextDep
) -> None:
    require_admin(user)
    users.end_sessions(session, name=name, actor=user.name)
    context.forget_identities(after=session)


@router.post("/me/sign-out-everywhere", status_code=204)
def end_my_sessions(user: CurrentUser, session: SessionDep, context: ContextDep) -> Response:
    """Every session of yours ends, this one included."""
    users.end_sessions(session, name=user.name, actor=user.name)
    context.forget_identities(after=session)
    return Response(status_code=204)


@router.post("/me/password")
def change_my_password(
    body: PasswordChange, user: CurrentUser, session: SessionDep, context: ContextDep
) -> Response:
    """Change your local password. Every other session of yours ends; this browser gets a
    new session cookie."""
    if user.password_hash is None:
        raise InvalidInput("this account signs in with your organisation's identity provider")
    if not verify_password(user.password_hash, body.current_password):
        raise NotAuthenticated("the current password is wrong; type it again")
    users.set_password(session, name=user.name, password=body.new_password, actor=user.name)
    context.forget_identities(after=session)
    response = JSONResponse({"name": user.name, "password_changed": True})
    set_session_cookie(response, context, user, session)
    return response
