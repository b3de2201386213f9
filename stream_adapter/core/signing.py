"""Decision signing: hex HMAC-SHA256 over a decision's value bytes and the fingerprint of the
record it decides (`approvals.fingerprint`), keys named for rotation.

Bound to its record, a signed decision decides that one call: replayed onto a call parked
later under the same ids, whose record differs, it is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stream_adapter.core import logs

__all__ = [
    "KEY_ID_HEADER",
    "SIGNATURE_HEADER",
    "DecisionKeys",
    "SignatureError",
    "announce",
    "ensure_keys_file",
    "new_keys_spec",
]

KEY_ID_HEADER = "decision-key-id"
SIGNATURE_HEADER = "decision-signature"


class SignatureError(ValueError):
    """A decision that must be signed is not, or not correctly; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DecisionKeys:
    """The configured keys by id. A decision without a signature is refused unless
    `allow_unsigned` (the ALLOW_UNSIGNED_DECISIONS setting) says otherwise."""

    keys: Mapping[str, bytes]
    allow_unsigned: bool = False

    def __repr__(self) -> str:
        return f"DecisionKeys(key_ids={sorted(self.keys)}, allow_unsigned={self.allow_unsigned})"

    @classmethod
    def parse(cls, spec: str, *, allow_unsigned: bool = False) -> DecisionKeys:
        """Parse `key_id:secret[,key_id:secret...]` (the DECISION_KEYS setting)."""
        keys: dict[str, bytes] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key_id, sep, secret = item.partition(":")
            if not sep or not key_id or not secret:
                raise ValueError("decision keys look like key_id:secret[,key_id:secret]")
            keys[key_id] = secret.encode()
        return cls(keys, allow_unsigned)

    @classmethod
    def from_settings(cls, settings: Any) -> DecisionKeys:
        """The keys of DECISION_KEYS, else of the file DECISION_KEYS_FILE names, and
        ALLOW_UNSIGNED_DECISIONS."""
        spec: str = settings.decision_keys
        path: Path | None = settings.decision_keys_file
        if not spec and path is not None:
            try:
                spec = Path(path).read_text().strip()
            except OSError as exc:
                raise ValueError(
                    f"cannot read the decision keys file {str(path)!r}: {exc.strerror}"
                ) from None
        return cls.parse(spec, allow_unsigned=settings.allow_unsigned_decisions)

    @property
    def required(self) -> bool:
        """True when decisions can be signed (keys are configured)."""
        return bool(self.keys)

    def sign(self, value: bytes, key_id: str | None = None, *, binds: str = "") -> dict[str, bytes]:
        """Headers that sign value, bound to the record fingerprint binds, with key_id
        (default: the last configured key)."""
        key_id = key_id or list(self.keys)[-1]
        digest = _mac(self.keys[key_id], value, binds)
        return {KEY_ID_HEADER: key_id.encode(), SIGNATURE_HEADER: digest.encode()}

    def verify(self, value: bytes, headers: Mapping[str, bytes], *, binds: str = "") -> None:
        """Raise SignatureError unless headers sign value, bound to binds, with a known key.

        A decision with neither header passes only when unsigned decisions are allowed; one
        that carries a signature is checked all the same. A signature over the value alone
        where one bound to a record is needed is refused as `unbound`.
        """
        key_id = headers.get(KEY_ID_HEADER)
        signature = headers.get(SIGNATURE_HEADER)
        if key_id is None and signature is None and self.allow_unsigned:
            return
        if key_id is None or signature is None:
            raise SignatureError("unsigned")
        secret = self.keys.get(key_id.decode("utf-8", "replace"))
        if secret is None:
            raise SignatureError("unknown key id")
        given = signature.strip().lower()
        if hmac.compare_digest(_mac(secret, value, binds).encode(), given):
            return
        if binds and hmac.compare_digest(_mac(secret, value, "").encode(), given):
            raise SignatureError("unbound")
        raise SignatureError("bad signature")


def _mac(secret: bytes, value: bytes, binds: str) -> str:
    """The hex HMAC of value, bound to a record fingerprint when binds is given."""
    message = b"%s\n%s" % (binds.encode(), value) if binds else value
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def announce(keys: DecisionKeys, *, decides: bool = True) -> None:
    """At start: a WARNING when decisions are accepted unsigned, or when none can be (no keys).

    decides: whether this process handles decisions at all (it has confirm tools, or it
    writes decisions); without, a missing key is nothing to warn about.
    """
    if keys.allow_unsigned:
        logs.event(
            logs.WARNING,
            "security: unsigned decisions are accepted (ALLOW_UNSIGNED_DECISIONS); anyone "
            "who can write the decisions topic can approve calls",
            event="unsigned_decisions_allowed",
        )
    elif not keys.required and decides:
        logs.event(
            logs.WARNING,
            "security: no decision keys; every decision is refused until DECISION_KEYS "
            "(or DECISION_KEYS_FILE) is set",
            event="no_decision_keys",
        )


def new_keys_spec(key_id: str = "k1") -> str:
    """A fresh `key_id:secret` with a 256-bit random secret."""
    return f"{key_id}:{secrets.token_hex(32)}"


def ensure_keys_file(path: str | Path) -> Path:
    """Write a fresh key to path (mode 0600) unless it already holds keys; return the path.

    Run once per deployment (scripts/run.sh, compose's `keys` service): the worker and the
    review service both read the file (DECISION_KEYS_FILE), so they share the key.
    """
    target = Path(path)
    if target.exists() and target.read_text().strip():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(new_keys_spec() + "\n")
    return target
