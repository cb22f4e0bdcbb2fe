"""GET /api/v1/csrf: the token a script sends as X-CSRF-Token with the session cookie."""

from __future__ import annotations

from fastapi import APIRouter, Request

from tbhub.http.csrf import binding_of
from tbhub.http.deps import ContextDep, CurrentUser

router = APIRouter(prefix="/api/v1", tags=["session"])


@router.get("/csrf")
def csrf_token(request: Request, context: ContextDep, user: CurrentUser) -> dict[str, str]:
    """For browser scripts only: the header value that lets a call made with this session
    cookie change anything. Calls with an API token need none."""
    binding = binding_of(request, context.cookies)
    assert binding is not None  # CurrentUser means a session cookie was read
    return {"header": "X-CSRF-Token", "token": context.csrf.token(binding)}
