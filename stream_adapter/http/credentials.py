"""Bearer tokens for the HTTP tool server, checked against a reviewers-format file.

The tokens, the file and the scrypt check are the review service's (`review.auth`). A token
that passed is remembered for a short while under its SHA-256, so a busy caller pays for
scrypt once a minute rather than on every request; removing or re-issuing a name in the file
ends it at once, since every hit is re-checked against the file as it is now.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from stream_adapter.review.auth import ReviewersFile, Unauthenticated

__all__ = ["BearerTokens", "bearer_token"]


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; Unauthenticated otherwise."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("a bearer token is required")
    return token.strip()


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
    ) -> None:
        self.file = file if isinstance(file, ReviewersFile) else ReviewersFile(Path(file))
        self.remember_s = remember_s
        self.max_remembered = max_remembered
        self._seen: OrderedDict[bytes, _Verified] = OrderedDict()

    async def name_of(self, authorization: str | None) -> str:
        """The name the header's bearer token belongs to; Unauthenticated otherwise."""
        token = bearer_token(authorization)
        key = hashlib.sha256(token.encode()).digest()
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is not None and seen.until > now and self._still_listed(seen):
            self._seen.move_to_end(key)
            return seen.name
        self._seen.pop(key, None)
        reviewer = await asyncio.to_thread(self.file.verify, token)
        self._seen[key] = _Verified(
            reviewer.name, reviewer.token_id, reviewer.digest, now + self.remember_s
        )
        while len(self._seen) > self.max_remembered:
            self._seen.popitem(last=False)
        return reviewer.name

    def _still_listed(self, seen: _Verified) -> bool:
        current = self.file.by_token_id(seen.token_id)
        return current is not None and current.name == seen.name and current.digest == seen.digest
