"""Attack: frame tbhub's pages (clickjacking), sniff a JSON answer as HTML, or inject a
script or form target into a page. Every control-plane answer carries a strict CSP and the
usual headers; board pages get tbhub's own CSP on top of TensorBoard's (tests/e2e)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tbhub.http.security_headers import PAGE_CSP


def test_pages_and_api_answers_carry_a_strict_csp_and_no_sniffing(client: TestClient) -> None:
    for path in ("/auth/login", "/api/v1/projects", "/healthz", "/no/such/page"):
        response = client.get(path)
        assert response.headers["content-security-policy"] == PAGE_CSP, path
        assert "frame-ancestors 'none'" in PAGE_CSP and "'unsafe-inline'" not in PAGE_CSP
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"
