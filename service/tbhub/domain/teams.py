"""Teams: people who get project roles together. Members are added by hand or synced from
an OIDC groups claim at each sign-in (`TBHUB_OIDC_GROUP_TEAMS`)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from tbhub.core.errors import AlreadyExists, NotFound
from tbhub.core.models import Project, Role, Team, TeamMember, TeamRole, User
from tbhub.core.names import check_team_name
from tbhub.domain import audit
from tbhub.domain.projects import get_project
from tbhub.domain.users import get_user

MANUAL = "manual"
FROM_OIDC = "oidc"


def create_team(session: Session, *, name: str, actor: str) -> Team:
    check_team_name(name)
    if session.scalar(select(Team).where(Team.name == name)) is not None:
        raise AlreadyExists(
            f"team {name!r} already exists; list teams with `tbhub admin team list`"
        )
    team = Team(name=name)
    session.add(team)
    session.flush()
    audit.record(session, actor=actor, action="team.create", target=name)
    return team


def get_team(session: Session, *, name: str) -> Team:
    team = session.scalar(select(Team).where(Team.name == name))
    if team is None:
        raise NotFound(f"no team named {name!r}; list teams with `tbhub admin team list`")
    return team


def delete_team(session: Session, *, name: str, actor: str) -> None:
    session.delete(get_team(session, name=name))
    audit.record(session, actor=actor, action="team.delete", target=name)
    session.flush()


def add_member(session: Session, *, team: str, user: str, actor: str) -> None:
    team_row, user_row = get_team(session, name=team), get_user(session, name=user)
    if session.get(TeamMember, (team_row.id, user_row.id)) is None:
        session.add(TeamMember(team_id=team_row.id, user_id=user_row.id, source=MANUAL))
        audit.record(session, actor=actor, action="team.member.add", target=team, user=user)
        session.flush()


def remove_member(session: Session, *, team: str, user: str, actor: str) -> None:
    team_row, user_row = get_team(session, name=team), get_user(session, name=user)
    member = session.get(TeamMember, (team_row.id, user_row.id))
    if member is None:
        raise NotFound(f"{user} is not a member of team {team}")
    session.delete(member)
    audit.record(session, actor=actor, action="team.member.remove", target=team, user=user)
    session.flush()


def grant(session: Session, *, project: str, team: str, role: Role, actor: str) -> None:
    """Give a team a role in a project (or change it)."""
    project_row, team_row = get_project(session, name=project), get_team(session, name=team)
    row = session.get(TeamRole, (team_row.id, project_row.id))
    if row is None:
        session.add(TeamRole(team_id=team_row.id, project_id=project_row.id, role=role))
    else:
        row.role = role
    audit.record(session, actor=actor, action="project.team", target=project, team=team,
                 role=role.value)  # fmt: skip
    session.flush()


def revoke(session: Session, *, project: str, team: str, actor: str) -> None:
    project_row, team_row = get_project(session, name=project), get_team(session, name=team)
    row = session.get(TeamRole, (team_row.id, project_row.id))
    if row is None:
        raise NotFound(f"team {team} has no role in {project}")
    session.delete(row)
    audit.record(session, actor=actor, action="project.team.remove", target=project, team=team)
    session.flush()


def list_teams(session: Session) -> list[dict[str, object]]:
    teams = list(session.scalars(select(Team).order_by(Team.name)))
    members = session.execute(
        select(TeamMember.team_id, User.name, TeamMember.source)
        .join(User, User.id == TeamMember.user_id)
        .order_by(User.name)
    ).all()
    roles = session.execute(select(TeamRole.team_id, TeamRole.project_id, TeamRole.role)).all()
    names = {pid: name for pid, name in session.execute(select(Project.id, Project.name))}
    return [
        {
            "name": t.name,
            "members": [{"user": n, "source": src} for tid, n, src in members if tid == t.id],
            "roles": {names[pid]: r.value for tid, pid, r in roles if tid == t.id},
        }
        for t in teams
    ]


def project_teams(session: Session, *, project: str) -> list[dict[str, object]]:
    """The teams with a role in a project: name, role and members, by team name."""
    project_row = get_project(session, name=project)
    rows = session.execute(
        select(Team.id, Team.name, TeamRole.role)
        .join(TeamRole, TeamRole.team_id == Team.id)
        .where(TeamRole.project_id == project_row.id)
        .order_by(Team.name)
    ).all()
    members = session.execute(
        select(TeamMember.team_id, User.name)
        .join(User, User.id == TeamMember.user_id)
        .where(TeamMember.team_id.in_([team_id for team_id, _, _ in rows]))
        .order_by(User.name)
    ).all()
    return [
        {"team": name, "role": role.value,
         "members": [user for tid, user in members if tid == team_id]}
        for team_id, name, role in rows
    ]  # fmt: skip


def sync_groups(
    session: Session, *, user: User, groups: tuple[str, ...], group_teams: Mapping[str, str]
) -> None:
    """Make the user's OIDC-synced team memberships follow their groups: join each team a
    group of theirs maps to, leave each synced team none of their groups maps to any more.
    Memberships added by hand are left alone."""
    wanted = {group_teams[g] for g in groups if g in group_teams}
    teams = {
        t.name: t
        for t in session.scalars(select(Team).where(Team.name.in_(set(group_teams.values()))))
    }
    for name in wanted - set(teams):
        teams[name] = create_team(session, name=name, actor="oidc")
    current = {
        m.team_id: m
        for m in session.scalars(select(TeamMember).where(TeamMember.user_id == user.id))
    }
    for name in wanted:
        if teams[name].id not in current:
            session.add(TeamMember(team_id=teams[name].id, user_id=user.id, source=FROM_OIDC))
            audit.record(session, actor="oidc", action="team.member.add", target=name,
                         user=user.name)  # fmt: skip
    for team_id, member in current.items():
        team = next((t for t in teams.values() if t.id == team_id), None)
        if member.source == FROM_OIDC and team is not None and team.name not in wanted:
            session.execute(delete(TeamMember).where(TeamMember.team_id == team_id,
                                                     TeamMember.user_id == user.id))  # fmt: skip
            audit.record(session, actor="oidc", action="team.member.remove", target=team.name,
                         user=user.name)  # fmt: skip
    session.flush()
