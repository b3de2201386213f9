"""Reviewers and their credentials: hashed tokens on file, signed session cookies, CSRF tokens.

A token is `sa1.<token_id>.<secret>`; the file keeps only the token_id and an scrypt hash of the
whole token with a per-reviewer salt, so the token is shown once and cannot be recovered. Sessions
and CSRF tokens are HMAC-SHA256 under the service's session secret.

Each scrypt takes 16 MiB and tens of milliseconds, so a token is hashed only when it has the
token format, after its attempt is counted against its address, and on a few threads of its own
with a bounded queue (`TokenChecks`): a flood of bogus tokens costs little and waits its turn.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stream_adapter.core.approvals import utc_now
from stream_adapter.core.errors import Forbidden as Forbidden
from stream_adapter.core.errors import TokenChecksBusy as TokenChecksBusy
from stream_adapter.core.errors import ToolUsageError
from stream_adapter.core.errors import TooManyFailures as TooManyFailures
from stream_adapter.core.errors import Unauthenticated as Unauthenticated

TOKEN_PREFIX = "sa1"
TOKEN_RE = re.compile(r"sa1\.[0-9a-f]{8,32}\.[A-Za-z0-9_-]{32,86}")
"""The shape of every token `new_token` makes (with room either way): anything else is refused
before it is hashed."""
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
SCRYPT = {"n": 2**14, "r": 8, "p": 1}
_SCRYPT_MAXMEM = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Reviewer:
    """One reviewer as the file has them."""

    name: str
    token_id: str
    salt: bytes
    digest: bytes
    created_at: str
    roles: tuple[str, ...] = ()
    """Roles a tool may require of whoever decides its calls (REVIEW_TOOL_ROLES)."""
    callers: tuple[str, ...] = ()
    """Caller names (of a callers file) this person also holds: their calls are their own."""

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "token_id": self.token_id,
            "salt": self.salt.hex(),
            "scrypt": SCRYPT,
            "hash": self.digest.hex(),
            "created_at": self.created_at,
        }
        if self.roles:
            body["roles"] = list(self.roles)
        if self.callers:
            body["callers"] = list(self.callers)
        return body

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reviewer:
        return cls(
            name=str(data["name"]),
            token_id=str(data["token_id"]),
            salt=bytes.fromhex(data["salt"]),
            digest=bytes.fromhex(data["hash"]),
            created_at=str(data.get("created_at", "")),
            roles=tuple(str(r) for r in data.get("roles", ())),
            callers=tuple(str(c) for c in data.get("callers", ())),
        )


def hash_token(token: str, salt: bytes) -> bytes:
    """scrypt(token, salt): slow enough that a stolen file does not give tokens away cheaply."""
    return hashlib.scrypt(token.encode(), salt=salt, maxmem=_SCRYPT_MAXMEM, dklen=32, **SCRYPT)


def new_token() -> tuple[str, str]:
    """A fresh (token_id, token)."""
    token_id = secrets.token_hex(6)
    return token_id, f"{TOKEN_PREFIX}.{token_id}.{secrets.token_urlsafe(32)}"


def well_formed(token: str) -> bool:
    """True when token has the token format (ASCII, `sa1.<hex id>.<url-safe secret>`)."""
    return TOKEN_RE.fullmatch(token) is not None


def token_id_of(token: str) -> str | None:
    """The token_id part of a well-formed token, else None."""
    if not well_formed(token):
        return None
    return token.split(".")[1]


class ReviewersFile:
    """The reviewers file (JSON, mode 0600), re-read whenever it changes on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._by_token_id: dict[str, Reviewer] = {}

    def _load(self) -> dict[str, Reviewer]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._by_token_id = None, {}
            return self._by_token_id
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            data = json.loads(self.path.read_text())
            reviewers = [Reviewer.from_json(item) for item in data.get("reviewers", [])]
            self._by_token_id = {r.token_id: r for r in reviewers}
            self._stamp = stamp
        return self._by_token_id

    def reviewers(self) -> list[Reviewer]:
        return sorted(self._load().values(), key=lambda r: r.name)

    def by_token_id(self, token_id: str) -> Reviewer | None:
        return self._load().get(token_id)

    def by_name(self, name: str) -> Reviewer | None:
        """The entry named name as the file has it now."""
        return next((r for r in self._load().values() if r.name == name), None)

    def add(
        self,
        name: str,
        *,
        replace: bool = False,
        roles: tuple[str, ...] = (),
        callers: tuple[str, ...] = (),
    ) -> str:
        """Add reviewer name (or give them a new token with replace) with their roles and the
        caller names they also hold; returns the token."""
        for word in (name, *roles, *callers):
            if not NAME_RE.match(word):
                raise ToolUsageError("names and roles are 1-64 letters, digits or ._@-")
        current = [r for r in self.reviewers() if r.name != name]
        if len(current) != len(self.reviewers()) and not replace:
            raise ToolUsageError(f"reviewer {name!r} exists (use --replace for a new token)")
        token_id, token = new_token()
        salt = secrets.token_bytes(16)
        reviewer = Reviewer(
            name, token_id, salt, hash_token(token, salt), utc_now(), tuple(roles), tuple(callers)
        )
        self._write([*current, reviewer])
        return token

    def remove(self, name: str) -> bool:
        """Remove reviewer name (their token and sessions stop working); False if absent."""
        current = self.reviewers()
        kept = [r for r in current if r.name != name]
        if len(kept) == len(current):
            return False
        self._write(kept)
        return True

    def _write(self, reviewers: list[Reviewer]) -> None:
        body = json.dumps({"version": 1, "reviewers": [r.to_json() for r in reviewers]}, indent=2)
        _write_private(self.path, body)
        self._stamp = None

    def verify(self, token: str) -> Reviewer:
        """The reviewer token belongs to; Unauthenticated otherwise (CPU-bound: run it through
        `TokenChecks`). A token without the token format is refused without hashing."""
        token_id = token_id_of(token)
        if token_id is None:
            raise Unauthenticated("invalid token")
        reviewer = self.by_token_id(token_id)
        if reviewer is None:
            hash_token(token, b"\0" * 16)  # same cost either way: no timing hint of valid ids
            raise Unauthenticated("invalid token")
        if not hmac.compare_digest(hash_token(token, reviewer.salt), reviewer.digest):
            raise Unauthenticated("invalid token")
        return reviewer


def _same(given: str, expected: str) -> bool:
    """Constant-time equality of a client's text and ours; any text (non-ASCII, lone
    surrogates) is only unequal, never an error."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in reviewer: name, the token it came from, its id (for CSRF), expiry."""

    name: str
    token_id: str
    sid: str
    expires: int


class TokenChecks:
    """Token checks (scrypt) on `threads` threads of their own, at most `queue` waiting.

    Not the event loop's default executor, so a flood of tokens never starves other work that
    runs in threads; past the queue, TokenChecksBusy (503) rather than unbounded waiting.
    """

    def __init__(self, threads: int = 2, queue: int = 32) -> None:
        if threads < 1 or queue < threads:
            raise ValueError("threads must be at least 1 and queue at least threads")
        self.threads = threads
        self.queue = queue
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="token-check")
        self._waiting = 0
        self.hashed = 0
        """Tokens handed to scrypt so far (the ones with the token format)."""

    async def verify(self, file: ReviewersFile, token: str) -> Reviewer:
        """file.verify(token) on the checks' threads; Unauthenticated at once when the token
        has not the token format; TokenChecksBusy when the queue is full."""
        if not well_formed(token):
            raise Unauthenticated("invalid token")
        if self._waiting >= self.queue:
            raise TokenChecksBusy("too many tokens are being checked; try again shortly")
        self._waiting += 1
        self.hashed += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, file.verify, token)
        finally:
            self._waiting -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class FailureLimiter:
    """Failed credentials per client address in a sliding window of window_s seconds.

    Past `limit` failures an address is refused (429) until its oldest failure leaves the
    window: each guess costs an scrypt, so unlimited guessing would also exhaust the CPU.
    An attempt counts as failed from its start (`begin`) until it succeeds, so a concurrent
    burst gets no more than `limit` tokens hashed.
    """

    def __init__(
        self, limit: int = 10, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if limit < 1 or window_s <= 0:
            raise ValueError("limit must be at least 1 and window_s positive")
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._announced: set[str] = set()

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._failures.get(client)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[client]
            self._announced.discard(client)
        return times

    def check(self, client: str) -> None:
        """TooManyFailures when client has used up its failures for now."""
        now = self._clock()
        times = self._recent(client, now)
        if len(times) >= self.limit:
            first = client not in self._announced
            self._announced.add(client)
            raise TooManyFailures(max(1.0, times[0] + self.window_s - now), first=first)

    def begin(self, client: str) -> float:
        """Count an attempt of client's as failed before its token is checked; its stamp for
        `succeeded`. TooManyFailures when client has used up its failures for now."""
        self.check(client)
        now = self._clock()
        self.failed(client, now)
        return now

    def succeeded(self, client: str, stamp: float) -> None:
        """The attempt begun at stamp did not fail after all (or was never checked)."""
        times = self._failures.get(client)
        if times is None:
            return
        with contextlib.suppress(ValueError):
            times.remove(stamp)
        if not times:
            del self._failures[client]

    def failed(self, client: str, now: float | None = None) -> bool:
        """Count a failure; True when it is the one that reaches the limit."""
        now = self._clock() if now is None else now
        if len(self._failures) > _MAX_TRACKED:
            for other in list(self._failures):
                self._recent(other, now)  # forget addresses whose failures have all expired
        times = self._failures.setdefault(client, self._recent(client, now))
        times.append(now)
        return len(times) == self.limit


_MAX_TRACKED = 10_000


class RevokedSessions:
    """Ids of sessions ended by logout, kept until they would have expired anyway.

    With a path, the list is a file (JSON, mode 0600) re-read when it changes, so a logout holds
    across restarts and for every instance sharing the file and the session secret. A logout
    reads, adds and writes under an exclusive lock of a file beside it, so concurrent logouts
    (threads or processes) never lose one another's revocation.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._stamp: tuple[int, int, int, int] | None = None
        self._revoked: dict[str, int] = {}

    def _load(self, *, fresh: bool = False) -> dict[str, int]:
        if self.path is None:
            return self._revoked
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._revoked = None, {}
            return self._revoked
        # Every write replaces the file, so its inode changes even when size and time do not.
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size)
        if fresh or stamp != self._stamp:
            data = json.loads(self.path.read_text() or "{}")
            self._revoked = {str(k): int(v) for k, v in data.get("revoked", {}).items()}
            self._stamp = stamp
        return self._revoked

    def __contains__(self, sid: object) -> bool:
        return sid in self._load()

    def add(self, session: Session, now: float | None = None) -> None:
        """Revoke session; expired entries are dropped as the list is written."""
        moment = int(now if now is not None else time.time())
        with self._locked():
            revoked = {k: v for k, v in self._load(fresh=True).items() if v >= moment}
            revoked[session.sid] = session.expires
            self._revoked = revoked
            if self.path is not None:
                _write_private(self.path, json.dumps({"version": 1, "revoked": revoked}))
                self._stamp = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock of the list's lock file (nothing without a path)."""
        if self.path is None:
            yield
            return
        lock = self.path.with_name(f".{self.path.name}.lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock


def _write_private(path: Path, body: str) -> None:
    """Write body to path atomically, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(body + "\n")
    os.replace(tmp, path)


class Sessions:
    """Signs and checks session cookies and CSRF tokens with one secret; logout revokes."""

    def __init__(self, secret: bytes, ttl_s: int, revoked: RevokedSessions | None = None) -> None:
        self.secret = secret
        self.ttl_s = ttl_s
        self.revoked = revoked if revoked is not None else RevokedSessions()

    def _mac(self, purpose: str, data: str) -> str:
        message = f"{purpose}:{data}".encode("utf-8", "surrogatepass")  # any cookie text
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def issue(self, reviewer: Reviewer, now: float | None = None) -> tuple[Session, str]:
        """A new session for reviewer and its cookie value."""
        expires = int((now if now is not None else time.time()) + self.ttl_s)
        session = Session(reviewer.name, reviewer.token_id, secrets.token_hex(16), expires)
        body = json.dumps(
            {"n": session.name, "t": session.token_id, "s": session.sid, "e": session.expires},
            separators=(",", ":"),
        )
        payload = _b64(body.encode())
        return session, f"{payload}.{self._mac('session', payload)}"

    def check(self, cookie: str, now: float | None = None) -> Session:
        """The session a cookie value carries; Unauthenticated if forged, malformed or expired."""
        payload, _, mac = cookie.partition(".")
        if not payload or not _same(mac, self._mac("session", payload)):
            raise Unauthenticated("invalid session")
        try:
            data = json.loads(_unb64(payload))
            session = Session(str(data["n"]), str(data["t"]), str(data["s"]), int(data["e"]))
        except (ValueError, KeyError, TypeError):
            raise Unauthenticated("invalid session") from None
        if session.expires < (now if now is not None else time.time()):
            raise Unauthenticated("session expired")
        if session.sid in self.revoked:
            raise Unauthenticated("session ended")
        return session

    def revoke(self, session: Session) -> None:
        """End session now (logout): its cookie is refused from here on, wherever it is kept."""
        self.revoked.add(session)

    def csrf_token(self, session: Session) -> str:
        """The CSRF token of a session's forms."""
        return self._mac("csrf", session.sid)

    def check_csrf(self, session: Session, token: str) -> None:
        if not token or not _same(token, self.csrf_token(session)):
            raise Forbidden("missing or invalid CSRF token")

    def login_csrf(self, nonce: str) -> str:
        """The CSRF token of the login form, bound to the pre-login nonce cookie."""
        return self._mac("login", nonce)

    def check_login_csrf(self, nonce: str, token: str) -> None:
        if not nonce or not token or not _same(token, self.login_csrf(nonce)):
            raise Forbidden("missing or invalid CSRF token")


def session_secret(configured: str) -> bytes:
    """The configured secret, or a random one (sessions then end when the service restarts)."""
    return configured.encode() if configured else secrets.token_bytes(32)
