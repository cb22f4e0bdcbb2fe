"""TensorBoard's plugins listing for a caller kept from some dashboards: read from the board,
answered without the restricted ones, so their tabs do not show (domain/dashboards.py).

The auth hook sends only these listing requests here (X-Board-Upstream: the control plane);
every other board request goes to the board itself."""

from __future__ import annotations

import json

import httpx
from fastapi import Response
from fastapi.responses import JSONResponse

from tbhub.core.errors import BoardUnavailable
from tbhub.domain.boards import BoardView
from tbhub.domain.dashboards import filter_listing

LISTING_TIMEOUT_SECONDS = 10.0
LISTING_MAX_BYTES = 1 << 20  # TensorBoard's listing is a few KiB


def filtered_listing(view: BoardView, path: str, denied: frozenset[str]) -> Response:
    """The board's answer to `path` (its plugins listing), less the `denied` dashboards."""
    try:
        answer = httpx.get(f"http://{view.upstream}{path}", timeout=LISTING_TIMEOUT_SECONDS)
        body = answer.content
        if answer.status_code != 200 or len(body) > LISTING_MAX_BYTES:
            raise ValueError(f"status {answer.status_code}, {len(body)} bytes")
        listing = json.loads(body)
        if not isinstance(listing, dict):
            raise ValueError("not a JSON object")
    except (httpx.HTTPError, ValueError) as exc:
        raise BoardUnavailable(
            f"the board did not give its list of dashboards ({str(exc)[:120]}); reload the "
            "page in a few seconds"
        ) from None
    return JSONResponse(filter_listing(listing, denied), headers={"Cache-Control": "no-store"})
