"""OpenID Connect sign-in (authorization code flow) through Authlib, against any standard
provider: discovery, state, nonce and PKCE S256, all set and all checked here.

Authlib leaves PKCE off unless asked and checks the nonce only when it is in its state, so
this module asks for both explicitly and validates the ID token itself (signature against
the provider's JWKS, issuer, audience, expiry and nonce) with joserfc, Authlib's JOSE
successor. The pending login (state, nonce, PKCE verifier, where to go next) travels in a
short-lived signed cookie, so nothing waits in memory across requests.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx

from tbhub.auth.sessions import Signer

if TYPE_CHECKING:
    from authlib.integrations.httpx_client import OAuth2Client
    from joserfc.jwk import KeySet
from tbhub.core.errors import ConfigError, NotAuthenticated

PENDING_COOKIE = "tbhub_oidc"
PENDING_MAX_AGE = 600  # seconds a sign-in at the provider may take
METADATA_TTL = 3600.0
HTTP_TIMEOUT = 10.0
ID_TOKEN_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")


class SignInRefused(NotAuthenticated):
    code = "sign_in_refused"


@dataclass(frozen=True)
class OidcConfig:
    discovery_url: str
    client_id: str
    client_secret: str
    scopes: str
    groups_claim: str


@dataclass(frozen=True)
class PendingLogin:
    state: str
    nonce: str
    verifier: str
    next: str
    expires_at: int


@dataclass(frozen=True)
class Identity:
    """Who the provider says signed in. Accounts are keyed by (issuer, subject), never email."""

    issuer: str
    subject: str
    email: str | None
    name: str | None
    preferred_username: str | None
    groups: tuple[str, ...]


class PendingSigner:
    """The pending sign-in as a signed cookie value, with its own derived key."""

    def __init__(self, secret_key: str) -> None:
        self._signer = Signer(secret_key, "tbhub-oidc-pending")

    def dump(self, pending: PendingLogin) -> str:
        return self._signer.dump(asdict(pending))

    def load(self, value: str | None, now: float | None = None) -> PendingLogin | None:
        try:
            pending = PendingLogin(**(self._signer.load(value) or {}))
        except TypeError:
            return None
        return pending if pending.expires_at >= (now or time.time()) else None


class OidcClient:
    """One configured provider: its discovery document and keys, fetched and cached."""

    def __init__(self, config: OidcConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._metadata: dict[str, Any] | None = None
        self._fetched_at = 0.0
        self._keys: KeySet | None = None

    def metadata(self) -> dict[str, Any]:
        with self._lock:
            if self._metadata is None or time.monotonic() - self._fetched_at > METADATA_TTL:
                self._metadata = self._get_json(self.config.discovery_url)
                self._fetched_at = time.monotonic()
                self._keys = None
            return self._metadata

    def _get_json(self, url: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = httpx.get(url, timeout=HTTP_TIMEOUT, **kwargs)
            response.raise_for_status()
            data = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ConfigError(
                f"the identity provider at {url} did not answer as expected ({exc}); "
                "check TBHUB_OIDC_DISCOVERY_URL and that the provider is up"
            ) from None
        if not isinstance(data, dict):
            raise ConfigError(f"the identity provider at {url} sent no JSON object")
        return data

    def keys(self, refresh: bool = False) -> KeySet:
        # joserfc (and cryptography under it) on the first sign-in: 4 MiB that an
        # installation without OIDC, and each API worker until then, does not hold.
        from joserfc.jwk import KeySet

        metadata = self.metadata()
        with self._lock:
            if self._keys is None or refresh:
                self._keys = KeySet.import_key_set(self._get_json(metadata["jwks_uri"]))  # type: ignore[arg-type]
            return self._keys

    def _oauth(self, redirect_uri: str) -> OAuth2Client:
        # Imported when a sign-in needs it: Authlib's httpx integration warns about httpx
        # at import, which every CLI command would otherwise print.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The httpx module is deprecated")
            from authlib.integrations.httpx_client import OAuth2Client

        return OAuth2Client(
            client_id=self.config.client_id,
            client_secret=self.config.client_secret,
            scope=self.config.scopes,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            timeout=HTTP_TIMEOUT,
        )

    def begin(self, redirect_uri: str, next_path: str) -> tuple[str, PendingLogin]:
        """The provider URL to send the browser to, and what to remember until it returns."""
        pending = PendingLogin(
            state=secrets.token_urlsafe(32),
            nonce=secrets.token_urlsafe(32),
            verifier=secrets.token_urlsafe(64),
            next=next_path,
            expires_at=int(time.time() + PENDING_MAX_AGE),
        )
        with self._oauth(redirect_uri) as client:
            url, _state = client.create_authorization_url(
                self.metadata()["authorization_endpoint"],
                state=pending.state,
                code_verifier=pending.verifier,
                nonce=pending.nonce,
            )
        return url, pending

    def finish(
        self, redirect_uri: str, pending: PendingLogin | None, params: dict[str, str]
    ) -> Identity:
        """Check the callback against the pending login, redeem the code, validate the ID
        token; raises SignInRefused with the reason."""
        if pending is None:
            raise SignInRefused("this sign-in expired or was already used; sign in again")
        if "error" in params:
            raise SignInRefused(
                f"the identity provider refused the sign-in ({params['error']}: "
                f"{params.get('error_description', 'no details')}); try again"
            )
        if not hmac.compare_digest(params.get("state", ""), pending.state):
            raise SignInRefused("the sign-in state does not match; start the sign-in again")
        code = params.get("code")
        if not code:
            raise SignInRefused("the identity provider sent no code; sign in again")
        metadata = self.metadata()
        try:
            with self._oauth(redirect_uri) as client:
                token = client.fetch_token(
                    metadata["token_endpoint"], code=code, code_verifier=pending.verifier
                )
        except Exception as exc:  # Authlib raises several types for a refused exchange
            raise SignInRefused(
                f"the identity provider did not accept the sign-in code ({exc}); sign in again"
            ) from None
        claims = self._validate_id_token(str(token.get("id_token", "")), pending.nonce)
        userinfo = self._userinfo(metadata, str(token.get("access_token", "")))
        if userinfo and userinfo.get("sub") != claims["sub"]:
            raise SignInRefused("the provider's user info is for another subject; refusing")
        merged = {**claims, **userinfo}
        groups = merged.get(self.config.groups_claim) or []
        return Identity(
            issuer=str(claims["iss"]),
            subject=str(claims["sub"]),
            email=_text(merged.get("email")),
            name=_text(merged.get("name")),
            preferred_username=_text(merged.get("preferred_username")),
            groups=tuple(str(g) for g in groups) if isinstance(groups, list) else (),
        )

    def _validate_id_token(self, id_token: str, nonce: str) -> dict[str, Any]:
        from joserfc import jwt
        from joserfc.errors import JoseError
        from joserfc.jwt import JWTClaimsRegistry

        if not id_token:
            raise SignInRefused("the identity provider sent no ID token; check the scopes")
        try:
            try:
                decoded = jwt.decode(id_token, self.keys(), algorithms=ID_TOKEN_ALGORITHMS)
            except JoseError:  # a rotated key: fetch the key set once more
                decoded = jwt.decode(
                    id_token, self.keys(refresh=True), algorithms=ID_TOKEN_ALGORITHMS
                )
            registry = JWTClaimsRegistry(
                leeway=60,
                iss={"essential": True, "value": self.metadata()["issuer"]},
                aud={"essential": True, "value": self.config.client_id},
                sub={"essential": True},
                exp={"essential": True},
                nonce={"essential": True, "value": nonce},
            )
            registry.validate(decoded.claims)
        except JoseError as exc:
            raise SignInRefused(
                f"the ID token did not validate ({exc.error}: {exc.description}); sign in again"
            ) from None
        return dict(decoded.claims)

    def _userinfo(self, metadata: dict[str, Any], access_token: str) -> dict[str, Any]:
        endpoint = metadata.get("userinfo_endpoint")
        if not endpoint or not access_token:
            return {}
        return self._get_json(endpoint, headers={"Authorization": f"Bearer {access_token}"})


def _text(value: object) -> str | None:
    return str(value)[:255] if value else None
