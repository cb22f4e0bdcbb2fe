"""/api/v1/tokens (mint, list, revoke API tokens) and /api/v1/me (who am I, what may I do)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from tbhub.auth.caller import (
    ACTION_WORDS,
    Caller,
    effective_role,
    require_project,
    require_token_manager,
)
from tbhub.auth.tokens import (
    MAX_TOKEN_DAYS,
    MIN_TOKEN_DAYS,
    create_token,
    expiry_from_days,
    get_token,
    list_tokens,
    revoke_token,
    token_summary,
)
from tbhub.core.bounds import INT64_MAX, PROJECT_NAME_MAX, TokenName
from tbhub.core.errors import Forbidden
from tbhub.core.models import ApiToken, Role, TokenScope, User
from tbhub.core.timestamps import Timestamp
from tbhub.domain.projects import visible_projects
from tbhub.http.deps import CallerDep, ContextDep, SessionDep

router = APIRouter(prefix="/api/v1", tags=["tokens"])


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TokenName = Field(description="A label, e.g. 'ci-train'")
    scope: TokenScope = Field(description="read (what a viewer may do) or write (an editor)")
    projects: list[Annotated[str, Field(min_length=1, max_length=PROJECT_NAME_MAX)]] = Field(
        min_length=1, max_length=100
    )
    expires_in_days: float | None = Field(
        default=None, ge=MIN_TOKEN_DAYS, le=MAX_TOKEN_DAYS, allow_inf_nan=False, strict=True
    )


class TokenOut(BaseModel):
    id: int
    name: str
    user: str
    hint: str = Field(description="The token's first characters, to tell tokens apart")
    scope: TokenScope
    projects: list[str]
    state: Literal["active", "expired", "revoked"]
    created_at: Timestamp
    expires_at: Timestamp | None
    revoked_at: Timestamp | None
    last_used_at: Timestamp | None

    @classmethod
    def of(cls, token: ApiToken) -> TokenOut:
        return cls.model_validate(token_summary(token))


class TokenCreated(TokenOut):
    token: str = Field(description="The secret. Shown this once; tbhub keeps only its hash")


def _session_user(caller: Caller, session: SessionDep, what: str) -> User:
    if caller.grant is not None:
        raise Forbidden(f"tokens cannot {what}; sign in to the web UI or use `tbhub admin token`")
    return session.get_one(User, caller.user_id)


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def mint_token(body: TokenCreate, caller: CallerDep, session: SessionDep) -> TokenCreated:
    """Create a token for yourself (signed in, not with a token)."""
    user = _session_user(caller, session, "create tokens")
    token, secret = create_token(
        session,
        user=user,
        name=body.name,
        scope=body.scope,
        projects=body.projects,
        expires_at=expiry_from_days(body.expires_in_days, datetime.now(UTC)),
        actor=user.name,
    )
    return TokenCreated(**TokenOut.of(token).model_dump(), token=secret)


@router.get("/tokens", response_model=list[TokenOut])
def read_tokens(
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
    project: Annotated[str | None, Query(max_length=63)] = None,
) -> list[TokenOut]:
    """Your own tokens; with `project`, every token that may act on it (owners, admins)."""
    _session_user(caller, session, "list tokens")
    if project is None:
        return [TokenOut.of(t) for t in list_tokens(session, user_id=caller.user_id)]
    access = require_project(context.access, caller, project, Role.owner)
    return [TokenOut.of(t) for t in list_tokens(session, project_id=access.project_id)]


@router.delete("/tokens/{token_id}", response_model=TokenOut)
def revoke(
    token_id: Annotated[int, Path(ge=1, le=INT64_MAX)],
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
) -> TokenOut:
    """Revoke a token: yours, one acting on a project you own, or any (instance admins)."""
    _session_user(caller, session, "revoke tokens")
    token = get_token(session, token_id)
    require_token_manager(context.access, caller, token)
    revoke_token(session, token=token, actor=caller.name)
    context.invalidate(context.tokens, after=session)
    return TokenOut.of(token)


class ProjectRights(BaseModel):
    name: str
    role: Role = Field(description="The role you act with here (a token's scope caps it)")
    can: list[str] = Field(description="read, write to, manage")


class MeOut(BaseModel):
    user: str
    via: str = Field(description="session or token")
    is_admin: bool = Field(description="Instance admin powers (never through a token)")
    token: TokenOut | None
    projects: list[ProjectRights]


@router.get("/me", response_model=MeOut)
def me(caller: CallerDep, context: ContextDep, session: SessionDep) -> MeOut:
    """Who this session or token is, and what it may do in each project it reaches."""
    user = session.get_one(User, caller.user_id)
    rights = []
    for project, _role in visible_projects(session, user=user):
        role = effective_role(caller, context.access.lookup(caller.user_id, project.name))
        if role is not None:
            can = [ACTION_WORDS[r] for r in Role if r.rank <= role.rank]
            rights.append(ProjectRights(name=project.name, role=role, can=can))
    token = None
    if caller.grant is not None:
        token = TokenOut.of(get_token(session, caller.grant.token_id))
    return MeOut(
        user=caller.name, via=caller.via, is_admin=caller.is_admin, token=token, projects=rights
    )
