"""The auth settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

# Secrets that appear in docs and examples; a deployment using one is not protected.
KNOWN_DEFAULT_SECRETS = frozenset({"changeme", "change-me", "secret", "tbhub", "default", "dev"})
MIN_SECRET_LENGTH = 32


class AuthSettings(BaseModel):
    """Sign-in and sessions: the secret key, local accounts, OIDC, who may create projects."""

    secret_key: SecretStr | None = Field(
        default=None,
        description="Signs session cookies. Generated into <data_dir>/secret_key when unset.",
    )
    session_max_age: int = Field(
        default=12 * 3600, gt=0, description="Seconds a sign-in session lasts."
    )
    local_login: bool = Field(
        default=True,
        description="Offer local password accounts on the sign-in page. Turn off once OIDC "
        "works; the admin CLI still manages local accounts.",
    )
    # Sign-in with an OpenID Connect provider (DESIGN.md, "Security model").
    oidc_discovery_url: str | None = Field(
        default=None,
        description="The provider's discovery document (…/.well-known/openid-configuration). "
        "Set it with the client id and secret to show a provider button on the sign-in page.",
    )
    oidc_client_id: str | None = Field(default=None, description="OIDC client id.")
    oidc_client_secret: SecretStr | None = Field(
        default=None, description="OIDC client secret (confidential client)."
    )
    oidc_scopes: str = Field(
        default="openid email profile",
        description="Scopes asked of the provider; add the one that carries groups (often "
        "`groups`) to map groups to teams.",
    )
    oidc_groups_claim: str = Field(
        default="groups", description="The claim that lists the user's groups."
    )
    oidc_group_teams: dict[str, str] = Field(
        default_factory=dict,
        description='JSON {"group": "team"}: a user in the group is made a member of the team '
        "at each sign-in, and taken out when no mapped group of theirs is left. Teams are "
        "created when first needed; memberships added by hand are left alone.",
    )
    oidc_session_max_age: int = Field(
        default=3600,
        gt=0,
        description="Seconds an OIDC sign-in lasts (at most TBHUB_SESSION_MAX_AGE). Going "
        "back through the provider (silent while its own session lasts) re-reads the "
        "user's groups, so leaving a group takes effect within this time.",
    )
    oidc_provider_name: str = Field(
        default="your organisation", description="Shown on the button: 'Sign in with …'."
    )
    # The web UI (issue 10).
    project_creation: Literal["admins", "anyone"] = Field(
        default="admins",
        description="Who may create projects from the projects page and POST /api/v1/projects: "
        "instance admins only, or any signed-in user (who becomes its owner).",
    )

    @field_validator("secret_key")
    @classmethod
    def _refuse_weak_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        raw = value.get_secret_value()
        if raw.lower() in KNOWN_DEFAULT_SECRETS or len(raw) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"TBHUB_SECRET_KEY is a known default or shorter than {MIN_SECRET_LENGTH} "
                "characters; unset it to have one generated, or use `openssl rand -hex 32`"
            )
        return value

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_discovery_url and self.oidc_client_id and self.oidc_client_secret)
