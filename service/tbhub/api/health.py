"""Liveness and readiness probes."""

from __future__ import annotations

import os

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from tbhub.http.deps import ContextDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(context: ContextDep) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        with context.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:  # a probe reports every failure rather than raising
        checks["database"] = f"error: {type(exc).__name__}"
    root = context.settings.storage
    checks["storage"] = "ok" if os.access(root, os.R_OK | os.X_OK) else f"error: {root} unreadable"
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if ok else "error", "checks": checks}, status_code=200 if ok else 503
    )
