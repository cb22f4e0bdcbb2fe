"""Every input has bounds that match where it is stored, on every route: out-of-range numbers,
infinities, booleans for numbers and over-long strings get 422 naming the field, never a
500, and nothing is written. Both databases."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.models import AuditEvent
from tbhub.core.settings import Settings
from tbhub.serve.app import build_context, create_app
from tests.test_api import seed, sign_in

METHODS_WITH_BODIES = ("post", "put", "patch")


def full_spec(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI spec of every route, hidden ones (sign-in form, board gate) included. The
    routers are module-level objects shared by every app: their flags are put back."""
    saved: list[tuple[Any, bool]] = []
    for included in app.routes:
        router = getattr(included, "original_router", None)
        if router is None:
            continue
        for item in [router, *(r for r in router.routes if isinstance(r, APIRoute))]:
            saved.append((item, item.include_in_schema))
            item.include_in_schema = True
    try:
        with warnings.catch_warnings():  # hidden routes share operation ids across methods
            warnings.simplefilter("ignore", UserWarning)
            return get_openapi(title="all", version="0", routes=app.routes)
    finally:
        for item, flag in saved:
            item.include_in_schema = flag


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return resolve(spec, spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    return schema


def unbounded(spec: dict[str, Any], schema: dict[str, Any], where: str) -> Iterator[str]:
    """Every place under `schema` that accepts values its storage could not hold."""
    schema = resolve(spec, schema)
    for key in ("anyOf", "oneOf", "allOf"):
        for i, option in enumerate(schema.get(key, [])):
            yield from unbounded(spec, option, f"{where}[{key}{i}]")
    kind = schema.get("type")
    if "enum" in schema or "const" in schema or kind in ("boolean", "null"):
        return
    if kind == "string" and "maxLength" not in schema and schema.get("format") != "binary":
        yield f"{where}: string without maxLength"
    low = "minimum" in schema or "exclusiveMinimum" in schema
    high = "maximum" in schema or "exclusiveMaximum" in schema
    if kind in ("integer", "number") and not (low and high):
        yield f"{where}: {kind} without minimum and maximum"
    if kind == "array":
        if "maxItems" not in schema:
            yield f"{where}: array without maxItems"
        yield from unbounded(spec, schema.get("items", {}), f"{where}[]")
    if kind == "object" or "properties" in schema:
        for name, prop in schema.get("properties", {}).items():
            yield from unbounded(spec, prop, f"{where}.{name}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and "maxProperties" not in schema:
            yield f"{where}: open object without maxProperties"


def operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def request_schemas(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, method, operation in operations(spec):
        for parameter in operation.get("parameters", []):
            where = f"{method.upper()} {path} {parameter['in']} {parameter['name']}"
            yield where, parameter["schema"]
        for media, body in operation.get("requestBody", {}).get("content", {}).items():
            yield f"{method.upper()} {path} body ({media})", body["schema"]


def test_every_parameter_and_body_field_on_every_route_is_bounded(settings: Settings) -> None:
    spec = full_spec(create_app(build_context(settings)))
    problems = [
        problem
        for where, schema in request_schemas(spec)
        for problem in unbounded(spec, schema, where)
    ]
    assert problems == []


def violations(schema: dict[str, Any]) -> Iterator[str]:
    """Raw JSON values that break `schema`'s bounds (raw, to send 1e999 and NaN as such)."""
    options = [schema, *schema.get("anyOf", [])]
    for option in options:
        kind = option.get("type")
        if kind in ("integer", "number"):
            yield "true"
            top = option.get("maximum", option.get("exclusiveMaximum"))
            yield json.dumps(top + 1 if kind == "integer" else top * 2)
            yield json.dumps(option["minimum"] - 1 if "minimum" in option
                             else option["exclusiveMinimum"])  # fmt: skip
        if kind == "number":
            yield from ("1e999", "-1e999", "Infinity", "NaN")
        if kind == "integer":
            yield from ("1.5", str(2**63), str(10**30))
        if kind == "string" and "maxLength" in option:
            yield json.dumps("x" * (option["maxLength"] + 1))


def test_out_of_range_values_get_422_naming_the_field_and_change_nothing(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    seed(factory, settings)
    app = create_app(build_context(settings))
    spec = full_spec(app)
    sent = 0
    with TestClient(app, base_url="http://testserver") as client, factory() as session:
        sign_in(client, "root")  # an instance admin passes every role check
        audit_before = session.scalar(select(func.count()).select_from(AuditEvent))
        for path, method, operation in operations(spec):
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if method not in METHODS_WITH_BODIES or body is None:
                continue
            url = path.replace("{name}", "vision").replace("{project}", "vision")
            properties = resolve(spec, body["schema"]).get("properties", {})
            for field, schema in properties.items():
                for raw in violations(resolve(spec, schema)):
                    response = client.request(
                        method, url, content=f'{{"{field}": {raw}}}',
                        headers={"Content-Type": "application/json"},
                    )  # fmt: skip
                    assert response.status_code == 422, (method, url, field, raw, response.text)
                    assert field in response.json()["error"]["message"], (field, raw)
                    sent += 1
        session.expire_all()
        assert session.scalar(select(func.count()).select_from(AuditEvent)) == audit_before
    assert sent > 20  # the retention API alone has five bounded fields


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("max_age_days", "1e999"),
        ("max_age_days", "Infinity"),
        ("active_minutes", "NaN"),
        ("max_project_bytes", str(10**30)),
        ("max_project_bytes", str(2**63)),
        ("keep_last", str(2**31)),
        ("keep_last", "true"),
        ("max_age_days", "false"),
    ],
)
def test_retention_policy_values_the_columns_cannot_hold_are_refused(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, field: str, raw: str
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    response = client.put(
        "/api/v1/projects/vision/retention",
        content=f'{{"{field}": {raw}}}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_input"
    assert field in response.json()["error"]["message"]
    assert client.get("/api/v1/projects/vision/retention").json()["overrides"][field] is None


def test_a_run_path_longer_than_its_column_is_refused(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    long_run = "r" * 2000
    response = client.post("/api/v1/projects/vision/retention/pins", json={"run": long_run})
    assert response.status_code == 422 and "run" in response.json()["error"]["message"]
    response = client.delete(f"/api/v1/projects/vision/retention/pins/{long_run}")
    assert response.status_code == 422
    # The longest run path that fits is judged on its merits (it does not exist): 404.
    fits = client.post("/api/v1/projects/vision/retention/pins", json={"run": "r" * 1024})
    assert fits.status_code == 404
