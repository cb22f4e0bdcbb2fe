from __future__ import annotations

import os
from pathlib import Path

import pytest

from tbhub.auth.passwords import hash_password, verify_password
from tbhub.auth.sessions import SessionSigner, read_session_cookie
from tbhub.core.errors import AmbiguousSession, InvalidInput, UnsafePath
from tbhub.core.names import check_project_name
from tbhub.http.csrf import CsrfTokens
from tbhub.storage.paths import inside_root, project_dir
from tbhub.web.pages import safe_next

SIGNER = SessionSigner("k" * 64, max_age=100)


def test_session_cookie_round_trips_until_it_expires() -> None:
    token = SIGNER.issue(42, now=1000, session_id="s1")
    data = SIGNER.verify(token, now=1050)
    assert data is not None and data.user_id == 42 and data.session_id == "s1"
    assert SIGNER.verify(token, now=1101) is None


@pytest.mark.parametrize("token", [None, "", "abc", "a.b.c", "eyJ1Ijo0Mn0.bad"])
def test_malformed_session_cookie_is_rejected(token: str | None) -> None:
    assert SIGNER.verify(token, now=1000) is None


def test_session_cookie_signed_with_another_key_is_rejected() -> None:
    other = SessionSigner("o" * 64, max_age=100)
    assert SIGNER.verify(other.issue(42, now=1000, session_id="s1"), now=1001) is None


def test_a_session_cookie_without_a_session_id_is_rejected() -> None:
    """Cookies made before sessions were kept on the server name none: sign in again."""
    old = SIGNER._signer.dump({"u": 42, "e": 2000, "v": 0})
    assert SIGNER.verify(old, now=1000) is None


def test_tampered_session_payload_is_rejected() -> None:
    payload, mac = SIGNER.issue(42, now=1000, session_id="s1").split(".")
    forged_payload = SIGNER.issue(1, now=1000, session_id="s1").split(".")[0]
    assert SIGNER.verify(f"{forged_payload}.{mac}", now=1001) is None
    assert SIGNER.verify(f"{payload}.{mac}", now=1001) is not None


def test_a_csrf_token_is_bound_to_its_session_and_key() -> None:
    tokens = CsrfTokens("k" * 64)
    token = tokens.token("session-a")
    assert tokens.valid("session-a", token)
    assert not tokens.valid("session-b", token)  # a planted pair of another session
    assert not CsrfTokens("j" * 64).valid("session-a", token)
    assert not tokens.valid("session-a", "session-a")  # a plain double submit
    assert not tokens.valid(None, token) and not tokens.valid("", "")


def test_passwords_verify_only_with_the_right_password() -> None:
    stored = hash_password("correct horse")
    assert verify_password(stored, "correct horse")
    assert not verify_password(stored, "wrong horse")
    assert not verify_password(None, "tbhub-dummy-password-for-timing")
    with pytest.raises(InvalidInput, match="too short"):
        hash_password("short")


@pytest.mark.parametrize("name", ["a", "vision-2", "0abc", "a" * 63])
def test_slugs_are_accepted(name: str) -> None:
    assert check_project_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", "A", "a_b", "a/b", "..", "a" * 64, "a.b", "é"])
def test_non_slugs_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(InvalidInput, match="not a slug"):
        check_project_name(name)


def test_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "escape")
    with pytest.raises(UnsafePath, match=r"escape.*is a symlink"):
        project_dir(root, "escape")
    assert inside_root(root, root / "fine") == (root / "fine").resolve()


@pytest.mark.parametrize(
    ("target", "expected"),
    [("/boards/p/", "/boards/p/"), ("//evil.example/", "/"), ("/\\evil", "/"),
     ("https://evil.example/", "/"), ("", "/"), (None, "/")],
)  # fmt: skip
def test_redirects_after_sign_in_stay_local(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected


@pytest.mark.parametrize(
    ("headers", "value"),
    [
        ([], None),
        (["other=1"], None),
        (["tbhub_session=abc"], "abc"),
        (["a=1; tbhub_session=abc ; b=2"], "abc"),
        (["tbhub_session="], None),
        (["tbhub_csrf=x", "tbhub_session=abc"], "abc"),
    ],
)
def test_one_session_cookie_is_read_exactly(headers: list[str], value: str | None) -> None:
    assert read_session_cookie(headers) == value


@pytest.mark.parametrize(
    "headers",
    [
        ["tbhub_session=a; tbhub_session=b"],
        ["tbhub_session=; tbhub_session=b"],
        ["tbhub_session=a", "tbhub_session=b"],
        ["TBHUB_SESSION=a"],
        ["tbhub_session=a; Tbhub_Session=b"],
        [" tbhub_session =a;tbhub_session=b"],
    ],
)
def test_a_session_cookie_that_could_be_read_two_ways_is_refused(headers: list[str]) -> None:
    with pytest.raises(AmbiguousSession):
        read_session_cookie(headers)
