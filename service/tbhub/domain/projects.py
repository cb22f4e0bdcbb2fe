"""Projects and memberships: keyword-only service functions that hold the queries."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload, sessionmaker

from tbhub.auth.caller import Caller, require_project_creator
from tbhub.auth.permissions import AccessCache, project_roles
from tbhub.core.db import transaction
from tbhub.core.errors import AlreadyExists, Forbidden, NotFound
from tbhub.core.models import Board, Membership, Project, Role, User
from tbhub.core.names import check_new_project_name, one_of
from tbhub.domain import audit
from tbhub.domain.users import get_user
from tbhub.storage.paths import open_project


def create_project(
    session: Session, *, name: str, storage_root: Path, owner: str | None, actor: str
) -> Project:
    """Create the row, its board row and `<storage_root>/<name>/` together."""
    check_new_project_name(name)
    if session.scalar(select(Project).where(Project.name == name)) is not None:
        raise AlreadyExists(f"project {name!r} already exists; pick another name")
    owner_user = get_user(session, name=owner) if owner is not None else None
    project = Project(name=name, board=Board())
    session.add(project)
    session.flush()
    if owner_user is not None:
        session.add(Membership(user=owner_user, project=project, role=Role.owner))
    audit.record(session, actor=actor, action="project.create", target=name, owner=owner)
    session.flush()
    # The directory comes last: if it fails the transaction rolls back with it.
    os.close(open_project(storage_root, name, create=True))  # refused: a symlink there
    return project


def add_project(
    factory: sessionmaker[Session],
    access: AccessCache,
    caller: Caller,
    *,
    name: str,
    owner: str | None,
    storage_root: Path,
    anyone: bool,
) -> Project:
    """A project created by someone signed in (the API and the projects page): the creation
    permission, the project committed with its owner (the caller unless an admin names
    another), then a fresh access cache so the owner gets in at once."""
    require_project_creator(caller, anyone=anyone)
    if owner is not None and owner != caller.name and not caller.is_admin:
        raise Forbidden("only instance admins make someone else a project's owner; leave "
                        "the owner out to own it yourself")  # fmt: skip
    with transaction(factory) as session:
        project = create_project(session, name=name, storage_root=storage_root,
                                 owner=owner or caller.name, actor=caller.name)  # fmt: skip
    access.invalidate()
    return project


def get_project(session: Session, *, name: str) -> Project:
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None:
        raise NotFound(f"no project named {name!r}; list projects with `tbhub admin project list`")
    return project


def parse_role(value: str) -> Role:
    return one_of(Role, value, "role")


def set_membership(
    session: Session, *, project: str, user: str, role: Role, actor: str
) -> Membership:
    project_row = get_project(session, name=project)
    user_row = get_user(session, name=user)
    membership = session.get(Membership, (user_row.id, project_row.id))
    if membership is None:
        membership = Membership(user=user_row, project=project_row, role=role)
        session.add(membership)
    else:
        membership.role = role
    audit.record(
        session, actor=actor, action="project.member", target=project, user=user, role=role.value
    )
    session.flush()
    return membership


def visible_projects(session: Session, *, user: User) -> list[tuple[Project, Role | None]]:
    """Projects the user may see, with their role, own or through a team (None for an admin
    who is not a member)."""
    roles = project_roles(session, user_id=user.id)
    query = select(Project).options(selectinload(Project.board)).order_by(Project.name)
    if not user.is_admin:
        query = query.where(Project.id.in_(roles))
    return [(p, roles.get(p.id)) for p in session.scalars(query)]


def list_projects(session: Session) -> list[Project]:
    return list(session.scalars(select(Project).order_by(Project.name)))


def remove_membership(session: Session, *, project: str, user: str, actor: str) -> None:
    """Take a user's own role in a project away (roles through teams stay)."""
    project_row = get_project(session, name=project)
    user_row = get_user(session, name=user)
    membership = session.get(Membership, (user_row.id, project_row.id))
    if membership is None:
        raise NotFound(f"{user} is not a member of {project} (a team may give them a role)")
    session.delete(membership)
    audit.record(session, actor=actor, action="project.member.remove", target=project, user=user)
    session.flush()


def list_members(session: Session, *, project: str) -> list[dict[str, str]]:
    project_row = get_project(session, name=project)
    rows = session.execute(
        select(User.name, Membership.role)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.project_id == project_row.id)
        .order_by(User.name)
    )
    return [{"user": name, "role": role.value} for name, role in rows]
