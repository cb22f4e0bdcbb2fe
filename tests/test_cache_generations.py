"""The auth caches agree across processes at once: a change made and invalidated in one
process of a server (a removed member, a revoked token, a signed-out session, a disabled
user) is the answer of the next lookup in another process of the same server, not the old
value for the cache's lifetime (core/cache_generations.py). Real processes on a real
database of each kind; on PostgreSQL also another server's process, through NOTIFY."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tbhub.auth.tokens import create_token, revoke_token
from tbhub.auth.ttl_cache import TtlCache
from tbhub.auth.user_sessions import end_session, start_session
from tbhub.core.cache_generations import Generations
from tbhub.core.db import transaction
from tbhub.core.models import ApiToken, Role, TokenScope
from tbhub.core.settings import Settings, prepare_runtime
from tbhub.domain.projects import create_project, remove_membership, set_membership
from tbhub.domain.users import create_user, set_disabled
from tbhub.http.deps import AppContext
from tbhub.serve.app import build_context
from tbhub.serve.cache_events import CacheListener, announcer
from tests.conftest import TEST_SECRET

# Another process of a server on the same data dir and database: it answers lookups from its
# own caches, one JSON line per request line.
LOOKUPS = """
import json, sys
from tbhub.auth.sessions import SessionData
from tbhub.core.errors import NotAuthenticated
from tbhub.core.settings import Settings, prepare_runtime
from tbhub.serve.app import build_context
data_dir, storage, url, key = sys.argv[1:5]
context = build_context(prepare_runtime(Settings(
    data_dir=data_dir, storage_root=storage, database_url=url, secret_key=key)))
print("ready", flush=True)
for line in sys.stdin:
    user_id, project, token, session_id = json.loads(line)
    access = context.access.lookup(user_id, project)
    try:
        context.tokens.lookup(token)
        token_ok = True
    except NotAuthenticated:
        token_ok = False
    live = context.sessions.is_live(SessionData(user_id, 2**40, session_id))
    print(json.dumps({"role": access.role.value if access.role else None,
                      "token": token_ok, "session": live}), flush=True)
"""


class Other:
    """The other process, asked about alice's access, token and session."""

    def __init__(self, settings: Settings) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", LOOKUPS, str(settings.data_dir), str(settings.storage),
             settings.db_url, TEST_SECRET],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == "ready\n"

    def ask(self, user_id: int, token: str, session_id: str) -> dict[str, object]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps([user_id, "vision", token, session_id]) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def server_settings(tmp_path: Path, database_url: str, name: str) -> Settings:
    return prepare_runtime(Settings(data_dir=tmp_path / name, storage_root=tmp_path / "storage",
                                    database_url=database_url, secret_key=TEST_SECRET))  # fmt: skip


@pytest.fixture
def alice(settings: Settings) -> Iterator[tuple[AppContext, int, str, str]]:
    """This process's context, and alice: an editor of vision with a token and a session."""
    context = build_context(settings)
    with transaction(context.factory) as session:
        user = create_user(session, name="alice", password=None, is_admin=False, actor="t")
        create_project(session, name="vision", storage_root=settings.storage, owner=None,
                       actor="t")  # fmt: skip
        set_membership(session, project="vision", user="alice", role=Role.editor, actor="t")
        _row, token = create_token(session, user=user, name="job", scope=TokenScope.write,
                                   projects=["vision"], expires_at=None, actor="t")  # fmt: skip
        expires = int((datetime.now(UTC) + timedelta(days=1)).timestamp())
        session_id = start_session(session, user_id=user.id, expires_at=expires)
        user_id = user.id
    yield context, user_id, token, session_id
    context.engine.dispose()


def test_a_change_in_one_process_is_the_next_answer_in_another(
    settings: Settings, alice: tuple[AppContext, int, str, str]
) -> None:
    context, user_id, token, session_id = alice
    other = Other(settings)
    try:
        assert other.ask(user_id, token, session_id) == {"role": "editor", "token": True,
                                                         "session": True}  # fmt: skip
        # Each change as the routes make it: committed, then the cache invalidated here.
        with transaction(context.factory) as session:
            remove_membership(session, project="vision", user="alice", actor="t")
        context.access.invalidate()
        assert other.ask(user_id, token, session_id)["role"] is None

        with transaction(context.factory) as session:
            row = session.query(ApiToken).one()
            revoke_token(session, token=row, actor="t")
        context.tokens.invalidate()
        assert other.ask(user_id, token, session_id)["token"] is False

        with transaction(context.factory) as session:
            end_session(session, session_id)
        context.sessions.invalidate()
        assert other.ask(user_id, token, session_id)["session"] is False
    finally:
        other.close()


def test_disabling_a_user_ends_every_cached_identity_in_another_process(
    settings: Settings, alice: tuple[AppContext, int, str, str]
) -> None:
    context, user_id, token, session_id = alice
    other = Other(settings)
    try:
        assert other.ask(user_id, token, session_id)["token"] is True
        with transaction(context.factory) as session:
            set_disabled(session, name="alice", disabled=True, actor="t")
        context.forget_identities()
        # The token's grant carries the user's disabled flag, the access its role, and
        # disabling ends the user's sessions.
        assert other.ask(user_id, token, session_id) == {"role": None, "token": False,
                                                         "session": False}  # fmt: skip
    finally:
        other.close()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_another_replica_drops_its_cache_on_notify(
    tmp_path: Path, settings: Settings, alice: tuple[AppContext, int, str, str]
) -> None:
    """A replica of its own (another data dir): the bump reaches it through NOTIFY."""
    context, user_id, token, session_id = alice
    context.generations.announce = announcer(context.engine, "first")
    replica = server_settings(tmp_path, settings.db_url, "replica")
    listener = CacheListener(replica.db_url, Generations.in_data_dir(replica.data_dir), "second")
    listener.start()
    other = Other(replica)
    try:
        assert listener.listening.wait(10)
        assert other.ask(user_id, token, session_id)["role"] == "editor"
        with transaction(context.factory) as session:
            remove_membership(session, project="vision", user="alice", actor="t")
        context.access.invalidate()
        deadline = time.monotonic() + 2.0  # far below the cache's 10 s
        while other.ask(user_id, token, session_id)["role"] is not None:
            assert time.monotonic() < deadline, "the other replica kept the removed role"
            time.sleep(0.05)
    finally:
        other.close()
        listener.stop()


def test_a_value_read_while_the_generation_moved_is_not_kept(tmp_path: Path) -> None:
    generations = Generations.in_data_dir(tmp_path)
    generation = generations.of("access")
    answers = iter(["old", "new"])

    def load(_key: str) -> str:
        generation.bump()  # a change commits while this read is under way
        return next(answers)

    cache = TtlCache[str, str](load, ttl=60, generation=generation)
    assert cache.get("k") == "old"
    assert cache.get("k") == "new", "the value read during the change was kept"


def test_the_counters_are_shared_through_the_file(tmp_path: Path) -> None:
    first, second = Generations.in_data_dir(tmp_path), Generations.in_data_dir(tmp_path)
    before = second.of("token").current()
    first.of("token").bump()
    assert second.of("token").current() == before + 1
    assert second.of("access").current() == 0
