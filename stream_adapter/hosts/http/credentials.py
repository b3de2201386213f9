"""Bearer tokens for the HTTP tool server, checked against a reviewers-format file.

The tokens, the file and the scrypt check are the review service's (`review.auth`): a token
without the token format is refused before it is hashed, and hashing runs on `TokenChecks`'
own few threads. A token that passed is remembered for a short while under its SHA-256, so a
busy caller pays for scrypt once a minute rather than on every request; removing or re-issuing
a name in the file ends it at once, since every hit is re-checked against the file as it is now.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from stream_adapter.review.auth import ReviewersFile, TokenChecks, Unauthenticated

__all__ = ["BearerTokens", "bearer_token"]


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; Unauthenticated otherwise."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("a bearer token is required")
    return token.strip()


def _key(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class _Verified:
    name: str
    token_id: str
    digest: bytes
    until: float


class BearerTokens:
    """Names the holder of a token listed in one file (``stream-adapter reviewers add``)."""

    def __init__(
        self,
        file: ReviewersFile | str | os.PathLike[str],
        *,
        remember_s: float = 60.0,
        max_remembered: int = 1024,
        checks: TokenChecks | None = None,
    ) -> None:
        self.file = file if isinstance(file, ReviewersFile) else ReviewersFile(Path(file))
        self.checks = checks if checks is not None else TokenChecks()
        self.remember_s = remember_s
        self.max_remembered = max_remembered
        self._seen: OrderedDict[bytes, _Verified] = OrderedDict()

    async def name_of(self, authorization: str | None) -> str:
        """The name the header's bearer token belongs to; Unauthenticated otherwise."""
        token = bearer_token(authorization)
        name = self.remembered(token)
        return name if name is not None else await self.verify(token)

    def remembered(self, token: str) -> str | None:
        """The name of a token verified a short while ago and still listed, else None."""
        seen = self._seen.get(_key(token))
        if seen is not None and seen.until > time.monotonic() and self._still_listed(seen):
            self._seen.move_to_end(_key(token))
            return seen.name
        return None

    async def verify(self, token: str) -> str:
        """The name token belongs to, checked against the file (scrypt, on the checks'
        threads), then remembered; Unauthenticated otherwise."""
        key = _key(token)
        self._seen.pop(key, None)
        reviewer = await self.checks.verify(self.file, token)
        until = time.monotonic() + self.remember_s
        self._seen[key] = _Verified(reviewer.name, reviewer.token_id, reviewer.digest, until)
        while len(self._seen) > self.max_remembered:
            self._seen.popitem(last=False)
        return reviewer.name

    def _still_listed(self, seen: _Verified) -> bool:
        current = self.file.by_token_id(seen.token_id)
        return current is not None and current.name == seen.name and current.digest == seen.digest
