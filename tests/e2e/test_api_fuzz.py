"""schemathesis against /api/v1/openapi.json of a real `tbhub serve`, through nginx, with a
valid write token: no answer is a 5xx and none breaks the schema the spec declares."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.jobs_hub import Hub

pytestmark = pytest.mark.e2e

SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))
REPO = Path(__file__).resolve().parents[2]  # where the hooks module is imported from


def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    hub: Hub, tmp_path: Path
) -> None:
    assert shutil.which(SCHEMATHESIS), "schemathesis comes with the integration extra"
    report = tmp_path / "junit.xml"
    done = subprocess.run(
        [
            SCHEMATHESIS, "run", f"{hub.server.base_url}/api/v1/openapi.json",
            "--header", f"Authorization: Bearer {hub.write_token}",
            "--checks", "not_a_server_error,response_schema_conformance,content_type_conformance",
            "--max-examples", "25",
            "--seed", "8",
            "--report", "junit", "--report-junit-path", str(report),
        ],
        env=hub.env(SCHEMATHESIS_HOOKS="tests.e2e.schemathesis_hooks", PYTHONPATH=str(REPO)),
        capture_output=True, text=True, timeout=900,
        cwd=tmp_path,  # its cache (.schemathesis/) goes there, not into the checkout
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "testcase" in report.read_text()  # it ran operations, it did not just load the spec
