"""Which X-Forwarded-For the control plane believes: only the one tbhub's own nginx set.

nginx overwrites X-Forwarded-For with the address it saw (`$remote_addr`, itself taken from
the proxies in TBHUB_TRUSTED_PROXIES and no one else) and proves the hop is its own with
`X-Tbhub-Hop`: a key derived from the secret key, written only into nginx's private config
and never sent to a board. Any other peer, a process on the same host included, is judged
by its own address, whatever headers it sends.
"""

from __future__ import annotations

import functools
import hashlib
import hmac

from starlette.requests import Request

HOP_HEADER = "X-Tbhub-Hop"
FORWARDED_MAX = 64  # an address (nginx writes one), never more


@functools.lru_cache(maxsize=4)
def hop_key(secret_key: str) -> str:
    return hmac.new(secret_key.encode(), b"tbhub-nginx-hop", hashlib.sha256).hexdigest()


def client_address(request: Request, secret_key: str) -> str:
    """The browser's address as tbhub's nginx saw it; for any other peer, the peer."""
    peer = request.client.host if request.client else ""
    forwarded = request.headers.get("x-forwarded-for", "").strip()
    proof = request.headers.get(HOP_HEADER, "")
    if forwarded and proof and hmac.compare_digest(proof.encode(), hop_key(secret_key).encode()):
        return forwarded[:FORWARDED_MAX]
    return peer
