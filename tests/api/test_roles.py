"""The roles matrix (docs/permissions.md shows it), checked for every caller kind against
every action."""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from pathlib import Path

import httpx
import pytest

from tbhub.core.upload_protocol import content_digest, pack_batch
from tests.api.conftest import Team

CALLERS = [None, "eve", "carol", "bob", "alice", "root",
           "bob-read", "bob-write", "alice-write", "root-write", "dave-write-speech"]  # fmt: skip
# One row per action, one status per caller above. A token is capped by its scope (read =
# viewer, write = editor) and never manages anything; a project the caller cannot see at all
# answers 404, like one that does not exist.
MATRIX: dict[str, list[int]] = {
    # action            anon eve carol bob alice root  b-r  b-w  a-w  r-w  d-w-speech
    "read runs":       [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "read project":    [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "search runs":     [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "register run":    [401, 404, 403, 201, 201, 201, 403, 201, 201, 201, 404],
    "annotate run":    [401, 404, 403, 200, 200, 200, 403, 200, 200, 200, 404],
    "pin run":         [401, 404, 403, 201, 201, 201, 403, 201, 201, 201, 404],
    "trash run":       [401, 404, 403, 200, 200, 200, 403, 200, 200, 200, 404],
    "read trash":      [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "restore run":     [401, 404, 403, 200, 200, 200, 403, 200, 200, 200, 404],
    "upload a chunk":  [401, 404, 403, 200, 200, 200, 403, 200, 200, 200, 404],
    "upload a batch":  [401, 404, 403, 200, 200, 200, 403, 200, 200, 200, 404],
    "upload offsets":  [401, 404, 403, 200, 200, 200, 403, 200, 200, 200, 404],
    "list run files":  [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "download a file": [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "set policy":      [401, 404, 403, 403, 200, 200, 403, 403, 403, 403, 404],
    "set member":      [401, 404, 403, 403, 200, 200, 403, 403, 403, 403, 404],
    "board settings":  [401, 404, 403, 403, 200, 200, 403, 403, 403, 403, 404],
    "restart board":   [401, 404, 403, 403, 202, 202, 403, 403, 403, 403, 404],
    "board page":      [401, 404, 200, 200, 200, 200, 401, 401, 401, 401, 401],
    "follow board":    [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "toggle plugin":   [401, 404, 403, 403, 303, 303, 401, 401, 401, 401, 401],
    "share link":      [401, 404, 403, 403, 201, 201, 403, 403, 403, 403, 404],
    "project tokens":  [401, 404, 403, 403, 200, 200, 403, 403, 403, 403, 403],
    "mint token":      [401, 404, 403, 201, 201, 201, 403, 403, 403, 403, 403],
    "global default":  [401, 403, 403, 403, 403, 200, 403, 403, 403, 403, 403],
    "create project":  [401, 403, 403, 403, 403, 201, 403, 403, 403, 403, 403],
    "live state":      [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "create user":     [401, 403, 403, 403, 403, 201, 403, 403, 403, 403, 403],
    "list boards":     [401, 403, 403, 403, 403, 200, 403, 403, 403, 403, 403],
    "read backups":    [401, 403, 403, 403, 403, 200, 403, 403, 403, 403, 403],
    "read storage":    [401, 403, 403, 403, 403, 200, 403, 403, 403, 403, 403],
    "compare runs":    [401, 404, 201, 201, 201, 201, 201, 201, 201, 201, 404],
    "list compares":   [401, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200],
    "read compare":    [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "rename compare":  [401, 404, 403, 200, 403, 200, 403, 200, 403, 403, 404],
    "delete compare":  [401, 404, 403, 204, 403, 204, 403, 204, 403, 403, 404],
}  # fmt: skip

Action = Callable[[Team, dict[str, str]], httpx.Response]
_BATCH = pack_batch([("hparams.yaml", b"lr: 0.1\n")])
_names = count()


def _register(team: Team) -> dict[str, object]:
    response = team.client.post(
        "/api/v1/projects/vision/runs", json={"name": "fixture"}, headers=team.headers("root")
    )
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def _new_run(team: Team) -> int:
    return int(str(_register(team)["id"]))


def _run_with_a_file(team: Team) -> int:
    """A new run of vision holding `hparams.yaml`; its id."""
    run = _register(team)
    (Path(str(run["logdir"])) / "hparams.yaml").write_text("lr: 0.1\n")
    return int(str(run["id"]))


def _trashed_run(team: Team) -> int:
    """A run an editor (root) has just moved to the trash; its trash id."""
    response = team.client.delete(
        f"/api/v1/projects/vision/runs/{_new_run(team)}", headers=team.headers("root")
    )
    assert response.status_code == 200, response.text
    return int(response.json()["trash_id"])


def _bobs_compare(team: Team) -> str:
    """A new compare board of bob's over a new run of vision; its slug."""
    runs = [f"vision/{_new_run(team)}"]
    response = team.client.post("/api/v1/compare", json={"runs": runs}, headers=team.headers("bob"))
    assert response.status_code == 201, response.text
    return str(response.json()["slug"])


ACTIONS: dict[str, Action] = {
    "read runs": lambda t, h: t.client.get("/api/v1/projects/vision/runs", headers=h),
    "search runs": lambda t, h: t.client.get(
        "/api/v1/runs?project=vision&hparam.lr>=0.01&sort=-metric.accuracy", headers=h
    ),
    "read project": lambda t, h: t.client.get("/api/v1/projects/vision", headers=h),
    "register run": lambda t, h: t.client.post(
        "/api/v1/projects/vision/runs", json={"name": f"r{next(_names)}"}, headers=h
    ),
    "annotate run": lambda t, h: t.client.patch(
        f"/api/v1/projects/vision/runs/{_new_run(t)}", json={"notes": "looks good"}, headers=h
    ),
    "pin run": lambda t, h: t.client.post(
        "/api/v1/projects/vision/retention/pins", json={"run": _register(t)["path"]}, headers=h
    ),
    "trash run": lambda t, h: t.client.delete(
        f"/api/v1/projects/vision/runs/{_new_run(t)}", headers=h
    ),
    "read trash": lambda t, h: t.client.get("/api/v1/projects/vision/trash", headers=h),
    "restore run": lambda t, h: t.client.post(
        f"/api/v1/projects/vision/trash/{_trashed_run(t)}/restore", headers=h
    ),
    "upload a chunk": lambda t, h: t.client.patch(
        f"/api/v1/projects/vision/runs/{_new_run(t)}/files/events.out.tfevents.1",
        content=b"x",
        headers={**h, "Upload-Offset": "0", "Content-Digest": content_digest(b"x")},
    ),
    "upload a batch": lambda t, h: t.client.post(
        f"/api/v1/projects/vision/runs/{_new_run(t)}/files/",
        content=_BATCH,
        headers={
            **h,
            "Content-Type": "application/x-tar",
            "Content-Digest": content_digest(_BATCH),
        },
    ),
    "upload offsets": lambda t, h: t.client.get(
        f"/api/v1/projects/vision/runs/{_new_run(t)}/files/", headers=h
    ),
    "list run files": lambda t, h: t.client.get(
        f"/api/v1/projects/vision/runs/{_new_run(t)}/contents", headers=h
    ),
    "download a file": lambda t, h: t.client.get(
        f"/api/v1/projects/vision/runs/{_run_with_a_file(t)}/contents/hparams.yaml", headers=h
    ),
    "set policy": lambda t, h: t.client.put(
        "/api/v1/projects/vision/retention", json={"keep_last": 5}, headers=h
    ),
    "board settings": lambda t, h: t.client.put(
        "/api/v1/projects/vision/board/settings", json={"pinned": True}, headers=h
    ),
    "restart board": lambda t, h: t.client.post("/api/v1/projects/vision/board/restart", headers=h),
    "board page": lambda t, h: t.client.get("/projects/vision/board", headers=h),
    "follow board": lambda t, h: t.client.get("/api/v1/boards/vision/state", headers=h),
    "toggle plugin": lambda t, h: t.client.post(
        "/projects/vision/board/plugins",
        data={"plugin": "projector", "state": "off", "csrf_token": h.get("X-CSRF-Token", "")},
        headers=h,
        follow_redirects=False,
    ),
    "set member": lambda t, h: t.client.put(
        "/api/v1/projects/vision/members/carol", json={"role": "viewer"}, headers=h
    ),
    "share link": lambda t, h: t.client.post(
        "/api/v1/projects/vision/share-links", json={"note": "reviewers"}, headers=h
    ),
    "project tokens": lambda t, h: t.client.get("/api/v1/tokens?project=vision", headers=h),
    "mint token": lambda t, h: t.client.post(
        "/api/v1/tokens",
        json={"name": "job", "scope": "write", "projects": ["vision"]},
        headers=h,
    ),
    "global default": lambda t, h: t.client.get("/api/v1/retention/default", headers=h),
    "create project": lambda t, h: t.client.post(
        "/api/v1/projects", json={"name": f"new-{next(_names)}"}, headers=h
    ),
    "live state": lambda t, h: t.client.get(
        f"/api/v1/projects/vision/state?run={_new_run(t)}", headers=h
    ),
    "create user": lambda t, h: t.client.post(
        "/api/v1/users", json={"name": f"u{next(_names)}", "password": "pw-of-a-user"}, headers=h
    ),
    "list boards": lambda t, h: t.client.get("/api/v1/boards", headers=h),
    "read backups": lambda t, h: t.client.get("/api/v1/backups", headers=h),
    "read storage": lambda t, h: t.client.get("/api/v1/storage", headers=h),
    "compare runs": lambda t, h: t.client.post(
        "/api/v1/compare", json={"runs": [f"vision/{_new_run(t)}"]}, headers=h
    ),
    "list compares": lambda t, h: t.client.get("/api/v1/compare", headers=h),
    "read compare": lambda t, h: t.client.get(f"/api/v1/compare/{_bobs_compare(t)}", headers=h),
    "rename compare": lambda t, h: t.client.patch(
        f"/api/v1/compare/{_bobs_compare(t)}", json={"name": "sweep"}, headers=h
    ),
    "delete compare": lambda t, h: t.client.delete(
        f"/api/v1/compare/{_bobs_compare(t)}", headers=h
    ),
}


@pytest.mark.parametrize("action", list(MATRIX))
def test_each_caller_gets_what_the_roles_matrix_says(team: Team, action: str) -> None:
    got = []
    for caller in CALLERS:
        response = ACTIONS[action](team, team.headers(caller))
        got.append(response.status_code)
        if response.is_error:
            assert set(response.json()) == {"error"}, (action, caller, response.text)
    assert dict(zip(CALLERS, got, strict=True)) == dict(zip(CALLERS, MATRIX[action], strict=True))
