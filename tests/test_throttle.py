"""Failed sign-ins slow down and then lock out per (account, address) and per address, only
slow an account down across addresses (a victim is never locked out by someone elsewhere),
and the answers never tell a real account from an unknown one."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.throttle import SOFT_DELAY_MAX, SignInGuard, SignInThrottle, ThrottlePolicy
from tbhub.core.models import AuditEvent
from tbhub.core.settings import Settings
from tbhub.serve.app import build_context, create_app
from tests.forms import form_token
from tests.test_api import PASSWORD, seed


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_free_failures_then_doubling_waits_then_a_lockout_then_forgotten() -> None:
    clock = Clock()
    throttle = SignInThrottle(ThrottlePolicy(), clock=clock)
    waits = []
    for _ in range(10):
        clock.now += throttle.wait_seconds("k")  # the caller waits as told, then fails again
        throttle.failed("k")
        waits.append(round(throttle.wait_seconds("k")))
    assert waits == [0, 0, 0, 0, 2, 4, 8, 16, 32, 900]
    clock.now += 899
    assert throttle.wait_seconds("k") == 1
    clock.now += 1 + 900
    assert throttle.wait_seconds("k") == 0


def test_success_clears_an_account_and_the_key_count_is_bounded() -> None:
    clock = Clock()
    throttle = SignInThrottle(ThrottlePolicy(max_keys=100), clock=clock)
    for _ in range(6):
        throttle.failed("alice")
    assert throttle.wait_seconds("alice") > 0
    throttle.succeeded("alice")
    assert throttle.wait_seconds("alice") == 0
    for i in range(1000):
        clock.now += 1
        throttle.failed(f"spray-{i}")
    assert len(throttle._records) <= 100


class Sleeps(list[float]):
    """Records the delays the guard asks for instead of sleeping them."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_an_account_failing_from_many_addresses_is_delayed_never_locked() -> None:
    clock = Clock()
    guard = SignInGuard(clock=clock, sleep=Sleeps())
    for i in range(200):  # an attacker spread over many addresses, 10 tries from each
        address = f"10.0.{i // 10}.1"
        clock.now += guard.wait_seconds("alice", address)
        guard.failed("alice", address)
    assert guard.wait_seconds("alice", "192.0.2.7") == 0  # the owner's own address
    assert guard.wait_seconds("alice", "10.0.19.1") > 600  # the attacker's: locked out
    assert guard.delay_seconds("alice") == SOFT_DELAY_MAX  # every attempt held, briefly
    assert guard.delay_seconds("bob") == 0
    delays = []
    fresh = SignInGuard(clock=clock, sleep=Sleeps())
    for i in range(16):
        fresh.failed("carol", f"10.1.{i}.1")
        delays.append(fresh.delay_seconds("carol"))
    assert delays == [0] * 9 + [0.5, 1, 2, 4, 4, 4, 4]
    clock.now += 901
    assert fresh.delay_seconds("carol") == 0


def try_sign_in(client: TestClient, name: str, password: str) -> tuple[int, str]:
    client.cookies.clear()
    response = client.post(
        "/auth/login",
        data={"username": name, "password": password, "csrf_token": form_token(client)},
        follow_redirects=False,
    )
    message = (
        response.text.split('role="alert">')[1].split("<")[0] if "alert" in response.text else ""
    )
    return response.status_code, message


def test_an_account_under_attack_is_slowed_then_refused_like_an_unknown_one(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    client.app.state.context.sign_ins = SignInGuard(clock=Clock())  # type: ignore[attr-defined]
    answers = {}
    for name in ("alice", "nobody-at-all"):
        codes = [try_sign_in(client, name, "wrong")[0] for _ in range(5)]
        assert codes == [401] * 5
        answers[name] = try_sign_in(client, name, "wrong")
    assert answers["alice"] == answers["nobody-at-all"]
    assert answers["alice"][0] == 429 and "too many failed sign-ins" in answers["alice"][1]
    # The right password is refused too while the wait lasts: the attacker learns nothing.
    assert try_sign_in(client, "alice", PASSWORD)[0] == 429
    # Another account is not affected.
    assert try_sign_in(client, "bob", PASSWORD)[0] == 303
    with factory() as session:
        failed = session.scalars(
            select(AuditEvent.target).where(AuditEvent.action == "auth.sign_in_failed")
        ).all()
    assert failed.count("alice") == 5 and failed.count("nobody-at-all") == 5


def test_one_address_spraying_many_accounts_is_refused(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    client.app.state.context.sign_ins = SignInGuard(clock=Clock())  # type: ignore[attr-defined]
    codes = [try_sign_in(client, f"user-{i}", "wrong")[0] for i in range(20)]
    assert codes == [401] * 20
    status, message = try_sign_in(client, "user-new", "wrong")
    assert status == 429 and "from your address" in message


def test_failures_from_one_address_never_lock_the_owner_out_of_their_account(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    """Ten and more failures from the attacker's address: that address is refused, even with
    the right password; the owner signs in from theirs at once, held only for the delay."""
    seed(factory, settings)
    sleeps = Sleeps()
    client.app.state.context.sign_ins = SignInGuard(clock=Clock(), sleep=sleeps)  # type: ignore[attr-defined]
    codes = [try_sign_in(client, "alice", "wrong")[0] for _ in range(12)]
    assert codes == [401] * 5 + [429] * 7
    assert try_sign_in(client, "alice", PASSWORD)[0] == 429
    app = client.app
    with TestClient(app, base_url="http://testserver", client=("192.0.2.7", 50000)) as owner:
        assert try_sign_in(owner, "alice", PASSWORD)[0] == 303
    assert sleeps == []  # five failures from one address do not slow the account yet


def test_the_owner_is_held_briefly_while_many_addresses_fail(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    app = create_app(build_context(settings))
    sleeps = Sleeps()
    app.state.context.sign_ins = SignInGuard(clock=Clock(), sleep=sleeps)
    for i in range(12):  # failed sign-ins from twelve addresses (counted as the route does)
        app.state.context.sign_ins.failed("alice", f"10.9.{i}.1")
    with TestClient(app, base_url="http://testserver", client=("192.0.2.7", 1)) as owner:
        assert try_sign_in(owner, "alice", PASSWORD)[0] == 303
    assert sleeps[-1] == 2.0 and max(sleeps) <= SOFT_DELAY_MAX
