"""Who is calling (a signed-in user or an API token) and what they may do in a project.

One check serves the API, the web pages and the board gate:

    action                                            viewer  editor  owner  admin
    read a project, its runs and board                  yes     yes    yes    yes
    register, upload, annotate, pin, trash runs          -      yes    yes    yes
    manage members, retention policy, project tokens     -       -     yes    yes
    instance-wide settings (global retention default)    -       -      -     yes

A token acts as its user, capped by its scope (read = viewer, write = editor) and limited to
the projects it names; it never has owner or admin powers.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import QueryParams

from tbhub.auth.permissions import Access, AccessCache
from tbhub.auth.tokens import MINT_HINT, TokenGrant
from tbhub.core.errors import BadRequest, Forbidden, NotAuthenticated, NotFound
from tbhub.core.log_context import note_request
from tbhub.core.models import ApiToken, Role, User
from tbhub.core.names import check_project_name

# Query parameters a client might put a token in; tokens in URLs end up in logs.
URL_TOKEN_PARAMS = frozenset({"token", "access_token", "api_key", "apikey", "bearer"})
ACTION_WORDS = {Role.viewer: "read", Role.editor: "write to", Role.owner: "manage"}


@dataclass(frozen=True)
class Caller:
    user_id: int
    name: str
    is_admin: bool  # instance admin, through a session; always False for a token
    grant: TokenGrant | None = None

    @property
    def via(self) -> str:
        return "token" if self.grant is not None else "session"

    @classmethod
    def of_user(cls, user: User) -> Caller:
        """A signed-in user (a session: the web pages, the API with a cookie)."""
        return cls(user_id=user.id, name=user.name, is_admin=user.is_admin)


def effective_role(caller: Caller, access: Access) -> Role | None:
    """The role the caller acts with in the project of `access` (None: none at all)."""
    if not access.user_exists or access.project_id is None:
        return None
    base = Role.owner if access.is_admin else access.role
    if base is None or caller.grant is None:
        return base
    if access.project_id not in caller.grant.project_ids:
        return None
    cap = caller.grant.cap
    return base if base.rank <= cap.rank else cap


@dataclass(frozen=True)
class ProjectAccess:
    project_id: int
    name: str
    role: Role


def require_project(
    access_cache: AccessCache, caller: Caller, project: str, need: Role
) -> ProjectAccess:
    """The project the caller may act on with at least `need`, or the right 4xx.

    A project the user cannot see at all is 404, the same as one that does not exist."""
    check_project_name(project)
    note_request(project=project)
    access = access_cache.lookup(caller.user_id, project)
    if access.project_id is None or not access.can_view:
        raise NotFound(
            f"no project named {project!r} that you can see; list yours with GET /api/v1/projects"
        )
    grant = caller.grant
    if grant is not None and access.project_id not in grant.project_ids:
        raise Forbidden(
            f"this token may act only on {', '.join(grant.project_names)}, not {project}; "
            f"use a token that names {project} ({MINT_HINT})"
        )
    role = effective_role(caller, access)
    assert role is not None
    if role.rank < need.rank:
        if grant is not None and need.rank > grant.cap.rank:
            hint = (
                "use a write token" if need == Role.editor else "sign in to the web UI as an owner"
            )
            raise Forbidden(
                f"a {grant.scope.value} token cannot {ACTION_WORDS[need]} {project}; {hint}"
            )
        raise Forbidden(
            f"you are {role.value} of {project}; to {ACTION_WORDS[need]} it you need to be "
            f"{need.value} or more: ask an owner of {project}"
        )
    return ProjectAccess(project_id=access.project_id, name=project, role=role)


def require_token_manager(access_cache: AccessCache, caller: Caller, token: ApiToken) -> None:
    """A token may be revoked by its user, by an owner of a project it acts on, or by an
    instance admin; to anyone else it does not exist (404)."""
    if caller.is_admin or token.user_id == caller.user_id:
        return
    for project in token.projects:
        role = effective_role(caller, access_cache.lookup(caller.user_id, project.name))
        if role == Role.owner:
            return
    raise NotFound(f"no token with id {token.id} that you manage; list yours with GET "
                   "/api/v1/tokens")  # fmt: skip


def require_admin(caller: Caller, what: str) -> None:
    if not caller.is_admin:
        raise Forbidden(f"only instance admins {what}; sign in as one (tokens never are)")


def require_project_creator(caller: Caller, *, anyone: bool) -> None:
    """Creating a project: instance admins, or every signed-in user when the instance allows
    it (TBHUB_PROJECT_CREATION=anyone). Never a token: it reaches only the projects it names."""
    if caller.grant is not None:
        raise Forbidden(
            "tokens cannot create projects; sign in to the web UI, or ask an admin to run "
            "`tbhub admin project create`"
        )
    if not (anyone or caller.is_admin):
        raise Forbidden(
            "only instance admins create projects here (TBHUB_PROJECT_CREATION=admins); "
            "ask one to create it, e.g. with `tbhub admin project create`"
        )


def refuse_token_in_url(query_params: QueryParams) -> None:
    for key, value in query_params.multi_items():
        if key.lower() in URL_TOKEN_PARAMS or value.startswith("tbh_"):
            raise BadRequest(
                "tokens are never accepted in a URL (URLs end up in logs); send the header "
                "`Authorization: Bearer <token>` instead"
            )


def bearer_token(authorization: str | None) -> str | None:
    if authorization is None:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise NotAuthenticated("send the token as `Authorization: Bearer tbh_...`")
    return value.strip()
