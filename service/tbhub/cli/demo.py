"""`tbhub demo`: an admin with a new random password, a `demo` project with real event
files, then `tbhub serve`."""

from __future__ import annotations

import secrets

from sqlalchemy.orm import Session

from tbhub.auth.passwords import hash_password
from tbhub.cli.common import db_session, out_console
from tbhub.core.db import upgrade
from tbhub.core.errors import NotFound
from tbhub.core.settings import Settings, prepare_runtime
from tbhub.domain.projects import create_project, get_project
from tbhub.domain.users import create_user, get_user
from tbhub.serve.server import hold_data_dir_lock, serve
from tbhub.storage.sample_logs import write_project

DEMO_ADMIN = "admin"
DEMO_PROJECT = "demo"


def _ensure_admin(session: Session, password: str) -> None:
    try:
        get_user(session, name=DEMO_ADMIN).password_hash = hash_password(password)
    except NotFound:
        create_user(session, name=DEMO_ADMIN, password=password, is_admin=True, actor="demo")


def _ensure_project(session: Session, settings: Settings) -> bool:
    try:
        get_project(session, name=DEMO_PROJECT)
        return False
    except NotFound:
        create_project(
            session,
            name=DEMO_PROJECT,
            storage_root=settings.storage,
            owner=DEMO_ADMIN,
            actor="demo",
        )
        return True


def run_demo(settings: Settings) -> None:
    """Set up a demo admin and project with sample runs, then serve."""
    settings = prepare_runtime(settings)
    # Before anything changes: a demo that cannot serve must leave the password as it was.
    lock = hold_data_dir_lock(settings.data_dir)
    upgrade(settings.db_url)
    password = secrets.token_urlsafe(12)
    with db_session(settings) as session:
        _ensure_admin(session, password)
        created = _ensure_project(session, settings)
    if created:
        out_console.print("writing sample runs for the demo project ...")
        write_project(settings.storage / DEMO_PROJECT, runs=4, steps=500, tags=3, prefix="mnist")
    out_console.print(
        f"\n  tbhub demo at [bold]{settings.public_url}[/]\n"
        f"  sign in as [bold]{DEMO_ADMIN}[/] with the password [bold]{password}[/] "
        "(new each time `tbhub demo` starts)\n"
        f"  then open {settings.public_url}/boards/{DEMO_PROJECT}/\n",
        highlight=False,
    )
    serve(settings, lock=lock)
