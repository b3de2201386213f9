"""Decision signing: hex HMAC-SHA256 over a decision's value bytes, keys named for rotation."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["KEY_ID_HEADER", "SIGNATURE_HEADER", "DecisionKeys", "SignatureError"]

KEY_ID_HEADER = "decision-key-id"
SIGNATURE_HEADER = "decision-signature"


class SignatureError(ValueError):
    """A decision that must be signed is not, or not correctly; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DecisionKeys:
    """The configured keys by id; empty means decisions need no signature."""

    keys: Mapping[str, bytes]

    @classmethod
    def parse(cls, spec: str) -> DecisionKeys:
        """Parse `key_id:secret[,key_id:secret...]` (the DECISION_KEYS setting)."""
        keys: dict[str, bytes] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key_id, sep, secret = item.partition(":")
            if not sep or not key_id or not secret:
                raise ValueError("decision keys look like key_id:secret[,key_id:secret]")
            keys[key_id] = secret.encode()
        return cls(keys)

    @property
    def required(self) -> bool:
        return bool(self.keys)

    def sign(self, value: bytes, key_id: str | None = None) -> dict[str, bytes]:
        """Headers that sign value with key_id (default: the last configured key)."""
        key_id = key_id or list(self.keys)[-1]
        digest = hmac.new(self.keys[key_id], value, hashlib.sha256).hexdigest()
        return {KEY_ID_HEADER: key_id.encode(), SIGNATURE_HEADER: digest.encode()}

    def verify(self, value: bytes, headers: Mapping[str, bytes]) -> None:
        """Raise SignatureError unless keys are off or headers sign value with a known key."""
        if not self.keys:
            return
        key_id = headers.get(KEY_ID_HEADER)
        signature = headers.get(SIGNATURE_HEADER)
        if key_id is None or signature is None:
            raise SignatureError("unsigned")
        secret = self.keys.get(key_id.decode("utf-8", "replace"))
        if secret is None:
            raise SignatureError("unknown key id")
        expected = hmac.new(secret, value, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(expected, signature.strip().lower()):
            raise SignatureError("bad signature")
