"""Pub/Sub push authentication: verify the OIDC token Pub/Sub sends with each push request.

A push subscription with authentication signs a Google ID token for its service account and
puts it in ``Authorization: Bearer``. ``PushVerifier`` checks its signature against Google's
published keys (fetched once, then cached), its audience, its issuer and that it names the
subscription's service account with a verified email. Needs the ``pubsub`` extra (PyJWT).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import jwt

from stream_adapter.core import logs
from stream_adapter.core.errors import BrokerError, Forbidden, Unauthenticated

__all__ = ["GOOGLE_ISSUERS", "GOOGLE_JWKS_URL", "PushVerifier"]

GOOGLE_JWKS_URL = "https://www.googleapis.com/oauth2/v3/certs"
"""Where Google publishes the keys that sign its ID tokens (a JWK set)."""

GOOGLE_ISSUERS = ("https://accounts.google.com", "accounts.google.com")
"""The ``iss`` values Google's ID tokens carry."""

_ALGORITHMS = ["RS256"]
_REQUIRED = ["exp", "iat", "iss", "aud", "email"]


class PushVerifier:
    """Checks a push request's token: Google's signature, audience, issuer, service account.

    ``audience`` is the one set on the push subscription (by default its endpoint URL);
    ``service_account_email`` is the account the subscription signs tokens as. Keys come from
    ``jwks_url`` and are kept for ``keys_cache_s`` seconds; a token with an unknown key id
    fetches them again, at most once per ``refetch_cooldown_s`` (so forged key ids cannot make
    the server hammer the key endpoint).
    """

    def __init__(
        self,
        *,
        audience: str,
        service_account_email: str,
        jwks_url: str = GOOGLE_JWKS_URL,
        issuers: Collection[str] = GOOGLE_ISSUERS,
        leeway_s: float = 30.0,
        keys_cache_s: float = 3600.0,
        refetch_cooldown_s: float = 30.0,
        fetch_timeout_s: float = 10.0,
    ) -> None:
        if not audience or not service_account_email:
            raise ValueError("audience and service_account_email are required")
        self.audience = audience
        self.service_account_email = service_account_email
        self.issuers = tuple(issuers)
        self.leeway_s = leeway_s
        self._keys = jwt.PyJWKClient(
            jwks_url,
            cache_keys=True,
            lifespan=keys_cache_s,
            timeout=fetch_timeout_s,
            cooldown_duration=refetch_cooldown_s,
        )

    async def verify(self, authorization: str | None) -> dict[str, Any]:
        """The token's claims; Unauthenticated (401), Forbidden (403) or BrokerError (503).

        A 503 means Google's keys could not be fetched: Pub/Sub pushes the message again.
        """
        token = _bearer(authorization)
        try:
            key = await asyncio.to_thread(self._keys.get_signing_key_from_jwt, token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuers,
                leeway=self.leeway_s,
                options={"require": _REQUIRED},
            )
        except jwt.PyJWKClientConnectionError:
            logs.event(logs.WARNING, "pubsub: signing keys unavailable", error_kind="BrokerError")
            raise BrokerError("cannot fetch the token signing keys") from None
        except (jwt.PyJWKClientError, jwt.InvalidTokenError) as exc:
            logs.event(logs.WARNING, "pubsub: push token refused", error_kind=type(exc).__name__)
            raise Unauthenticated("invalid push token") from None
        if (
            claims.get("email") != self.service_account_email
            or claims.get("email_verified") is not True
        ):
            logs.event(
                logs.WARNING, "pubsub: push token of another account", error_kind="Forbidden"
            )
            raise Forbidden("the push token names another service account")
        return claims


def _bearer(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("a bearer token is required")
    return token.strip()
