"""The API describes itself: the bearer scheme, the one error shape, and docs that load
nothing from outside tbhub (an air-gapped install has no CDN)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient


def test_docs_page_loads_only_assets_tbhub_serves(client: TestClient) -> None:
    page = client.get("/api/v1/docs")
    assert page.status_code == 200
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']|url: ?["']([^"']+)["']""", page.text)
    flat = [u for pair in urls for u in pair if u]
    assert flat and all(u.startswith("/api/v1/") for u in flat), flat
    assert "//" not in "".join(flat)
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        response = client.get(f"/api/v1/docs/assets/{asset}")
        assert response.status_code == 200 and len(response.content) > 500, asset


def test_every_operation_declares_the_error_shape(client: TestClient) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    error = spec["components"]["schemas"]["Error"]
    assert error["properties"]["error"]["required"] == ["code", "message"]
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            schema = operation["responses"]["422"]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Error"}, (method, path)


def test_a_real_422_matches_the_declared_shape(client: TestClient) -> None:
    response = client.get("/api/v1/projects/Bad_Name")
    assert response.status_code in (401, 422)
    assert set(response.json()) == {"error"}
    assert set(response.json()["error"]) == {"code", "message"}
