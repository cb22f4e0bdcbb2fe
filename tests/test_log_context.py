"""JSON log lines carry the request's id, user and project; a malformed id from outside is
replaced, and a line outside any request carries none. The request middleware's latency
labels stay bounded."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI
from fastapi.testclient import TestClient

from tbhub.core.log_context import JsonLines, begin_request, end_request, note_request
from tbhub.core.metrics import exposition
from tbhub.http.request_log import RequestLog
from tests.support.metrics_text import sample


def record(message: str, **fields: object) -> logging.LogRecord:
    made = logging.LogRecord("tbhub.test", logging.INFO, __file__, 1, message, None, None)
    if fields:
        made.fields = fields
    return made


def test_a_line_inside_a_request_carries_its_id_user_and_project() -> None:
    info, token = begin_request("0123456789abcdef0123456789abcdef")
    try:
        note_request(user="alice", user_id=7)
        note_request(project="vision")
        line = json.loads(JsonLines().format(record("hello", route="/x", status=200)))
    finally:
        end_request(token)
    assert info.request_id == "0123456789abcdef0123456789abcdef"
    assert line["message"] == "hello" and line["level"] == "info" and line["logger"] == "tbhub.test"
    assert (line["request_id"], line["user"], line["user_id"], line["project"]) == (
        "0123456789abcdef0123456789abcdef", "alice", 7, "vision")  # fmt: skip
    assert (line["route"], line["status"]) == ("/x", 200)


def test_a_malformed_request_id_is_replaced_by_a_new_one() -> None:
    for header in ("", "short", "has spaces in it", "x" * 65, 'quote"injection"0000'):
        info, token = begin_request(header)
        end_request(token)
        assert info.request_id != header and len(info.request_id) == 32


def test_a_line_outside_any_request_has_no_request_fields() -> None:
    note_request(user="nobody")  # no request: nothing to note on
    line = json.loads(JsonLines().format(record("background work")))
    assert "request_id" not in line and "user" not in line


def test_request_latency_labels_are_bounded_whatever_the_client_sends() -> None:
    """A made-up method or an unknown path adds no new series: `other` and `unmatched`."""
    app = FastAPI()
    app.add_middleware(RequestLog)
    client = TestClient(app)
    for method, path in (("BREW", "/pot"), ("GET", "/no/such/path/123"), ("GET", "/x/456")):
        client.request(method, path)
    text = exposition().decode()
    assert sample(text, "tbhub_http_request_duration_seconds_count", method="other")
    assert sample(text, "tbhub_http_request_duration_seconds_count", route="unmatched")
    assert "/no/such/path" not in text and "BREW" not in text
