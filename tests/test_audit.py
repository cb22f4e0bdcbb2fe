"""The audit log can be queried: by user, project, action and time, newest first, paged;
admins only over the API; the CLI prints it or --json. Both databases."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tests.test_api import seed, sign_in
from tests.test_cli import cli_env, tbhub  # noqa: F401 - the fixture is used by name


def test_admins_query_the_audit_log_with_filters_and_paging(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")  # auth.sign_in, target alice
    assert client.get("/api/v1/audit").status_code == 403
    client.put("/api/v1/projects/vision/retention", json={"keep_last": 4})
    sign_in(client, "root")
    everything = client.get("/api/v1/audit").json()["events"]
    assert everything[0]["action"] == "auth.sign_in" and everything[0]["actor"] == "root"
    assert [e["id"] for e in everything] == sorted((e["id"] for e in everything), reverse=True)
    alices = client.get("/api/v1/audit", params={"user": "alice"}).json()["events"]
    assert {e["action"] for e in alices} == {"user.create", "auth.sign_in", "retention.policy"}
    vision = client.get("/api/v1/audit", params={"project": "vision"}).json()["events"]
    assert {e["action"] for e in vision} >= {"retention.policy"}
    assert all(e["target"] == "vision" or e["target"].startswith("vision/") for e in vision)
    signins = client.get("/api/v1/audit", params={"action": "auth."}).json()["events"]
    assert [e["actor"] for e in signins] == ["root", "alice"]
    assert client.get("/api/v1/audit", params={"since": "2999-01-01"}).json()["events"] == []
    page = client.get("/api/v1/audit", params={"limit": 2}).json()
    rest = client.get("/api/v1/audit", params={"before_id": page["next_before_id"]}).json()
    assert [e["id"] for e in page["events"] + rest["events"]] == [e["id"] for e in everything]
    bad = client.get("/api/v1/audit", params={"since": "yesterday"})
    assert bad.status_code == 422 and "ISO 8601" in bad.json()["error"]["message"]


def test_the_cli_lists_the_audit_log(cli_env: Settings) -> None:  # noqa: F811
    assert tbhub("db", "upgrade")[0] == 0
    tbhub("admin", "user", "create", "carol", "--password-stdin", stdin="a-good-password\n")
    code, out, _ = tbhub("admin", "audit", "list", "--user", "carol", "--json")
    assert code == 0
    [event] = json.loads(out)
    assert (event["action"], event["target"]) == ("user.create", "carol")
    assert event["at"].endswith("Z")
    code, out, _ = tbhub("admin", "audit", "list", "--user", "nobody")
    assert code == 0 and "no audit events match" in out
    code, _, err = tbhub("admin", "audit", "list", "--since", "soon")
    assert code == 1 and "ISO 8601" in err
