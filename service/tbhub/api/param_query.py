"""hparam./metric. conditions in a query string: `?hparam.lr=0.1&metric.accuracy>=0.9`.

FastAPI cannot declare query names that carry the operator, so they are taken from the raw
query string, each item whole, and validated by domain/run_params.py.
"""

from __future__ import annotations

from urllib.parse import unquote_plus

from fastapi import Request

from tbhub.core.errors import InvalidInput
from tbhub.domain.run_params import MAX_FILTERS, ParamFilter, parse_filters

QUERY_MAX = 4096
PREFIXES = ("hparam.", "metric.")


def param_expressions(request: Request) -> list[ParamFilter]:
    """The hparam./metric. conditions of the request's query string, validated."""
    raw = request.url.query
    if len(raw) > QUERY_MAX:
        raise InvalidInput(f"the query string is longer than {QUERY_MAX} characters; "
                           "use fewer or shorter conditions")  # fmt: skip
    items = [unquote_plus(item) for item in raw.split("&") if item]
    found = [item for item in items if item.startswith(PREFIXES)]
    if len(found) > MAX_FILTERS:
        raise InvalidInput(f"at most {MAX_FILTERS} hparam./metric. conditions at once")
    return parse_filters(found)
