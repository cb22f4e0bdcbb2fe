"""Every JSON request model takes only true and false for a yes/no field: `"yes"`, `"true"`,
1 or `"on"` are refused (422), never read as true (`{"disabled": "yes"}` disabled an
account)."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tests.test_api import seed, sign_in

NOT_BOOLEANS = ("yes", "true", "1", 1, 0, "on", "off", "false")


def request_models(app: FastAPI) -> set[type[BaseModel]]:
    """The JSON body model of every route (forms aside: a checkbox sends "on")."""
    found: set[type[BaseModel]] = set()
    for included in app.routes:
        router = getattr(included, "original_router", None)
        for route in getattr(router, "routes", []):
            if isinstance(route, APIRoute) and route.body_field is not None:
                model = route.body_field.field_info.annotation
                if isinstance(model, type) and model.__module__.startswith("tbhub."):
                    found |= set(with_nested(model))
    return found


def with_nested(model: type[BaseModel]) -> Iterator[type[BaseModel]]:
    yield model
    for field in model.model_fields.values():
        for kind in flatten(field.annotation):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                yield from with_nested(kind)


def flatten(annotation: object) -> Iterator[object]:
    yield annotation
    for arg in typing.get_args(annotation):
        yield from flatten(arg)


def bool_fields(model: type[BaseModel]) -> list[str]:
    """Fields that are a yes/no (or none): `bool`, `bool | None`, strict or not."""
    return [name for name, field in model.model_fields.items()
            if bool in {plain(kind) for kind in union_members(field.annotation)}]  # fmt: skip


def union_members(annotation: object) -> tuple[object, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def plain(annotation: object) -> object:
    """`Annotated[bool, Strict()]` -> bool."""
    if typing.get_origin(annotation) is typing.Annotated:
        return typing.get_args(annotation)[0]
    return annotation


def refuses(model: type[BaseModel], name: str, value: object) -> bool:
    try:
        model.model_validate({name: value})
    except ValidationError as exc:
        return any(error["loc"][:1] == (name,) for error in exc.errors())
    return False


def test_every_yes_no_field_of_every_request_model_is_strict(client: TestClient) -> None:
    models = request_models(client.app)  # type: ignore[arg-type]
    fields = [(model, name) for model in models for name in bool_fields(model)]
    assert len(fields) >= 3  # the walk found the models with yes/no fields
    lenient = sorted(f"{model.__name__}.{name} = {value!r}" for model, name in fields
                     for value in NOT_BOOLEANS if not refuses(model, name, value))  # fmt: skip
    assert lenient == []
    for model, name in fields:
        assert not refuses(model, name, True) and not refuses(model, name, False)


@pytest.mark.parametrize("value", ["yes", 1, "true"])
def test_an_account_is_not_disabled_by_yes(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, value: object
) -> None:
    seed(factory, settings)
    sign_in(client, "root")
    response = client.patch("/api/v1/users/bob", json={"disabled": value})
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_input"
    users = {u["name"]: u for u in client.get("/api/v1/users").json()["users"]}
    assert users["bob"]["disabled"] is False
