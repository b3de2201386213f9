"""How long records live in an approval store: settled ones are removed once their retention
is over, pending ones expire when nobody decides them in time (the rules: approvals.py).

Both happen on access (a record past its retention reads as absent and is deleted; a pending
one past its expiry is expired before it is answered) and in `sweep`, which a store also runs
itself every `sweep_interval_s`, at the next park.
"""

from __future__ import annotations

import builtins
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from stream_adapter.core import logs
from stream_adapter.core.approvals import (
    DEFAULT_SETTLED_RETENTION_S,
    SETTLED_STATES,
    ApprovalRecord,
    ApprovalState,
    expire,
    expiry_due,
    log_expired,
    retention_due,
)
from stream_adapter.core.errors import AdapterError

__all__ = ["FROM_SETTINGS", "SWEEP_LIMIT", "AgingStore", "Lifetimes", "iso", "lifetimes"]

SWEEP_LIMIT = 1000
"""Records one sweep looks at per state: a large backlog goes in several sweeps."""


class _FromSettings:
    """The default of a store's lifetimes: the `STREAM_ADAPTER_*` settings."""

    def __repr__(self) -> str:
        return "FROM_SETTINGS"


FROM_SETTINGS = _FromSettings()
Lifetime = float | None | _FromSettings


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """A store's settled retention and pending expiry in seconds (None: kept, never expires)."""

    settled_retention_s: float | None = DEFAULT_SETTLED_RETENTION_S
    pending_expiry_s: float | None = None
    sweep_interval_s: float = 60.0


def lifetimes(settled_retention_s: Lifetime, pending_expiry_s: Lifetime) -> Lifetimes:
    """The lifetimes a store was given; those left FROM_SETTINGS come from SETTLED_RETENTION_S,
    PENDING_EXPIRY_S and APPROVALS_SWEEP_INTERVAL_S."""
    from stream_adapter.settings import Settings

    settings = Settings()
    return Lifetimes(
        settings.settled_retention_s
        if isinstance(settled_retention_s, _FromSettings)
        else settled_retention_s,
        settings.pending_expiry_s
        if isinstance(pending_expiry_s, _FromSettings)
        else pending_expiry_s,
        settings.approvals_sweep_interval_s,
    )


def iso(moment: datetime) -> str:
    """moment in the form records keep their times (`utc_now`), so strings compare as times."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AgingStore(ABC):
    """Retention and expiry over a store's load, compare-and-set and guarded delete."""

    lifetimes: Lifetimes = Lifetimes()
    _swept_at: float = float("-inf")

    @abstractmethod
    async def _load(self, approval_id: str) -> ApprovalRecord | None:
        """The stored record, or None."""

    @abstractmethod
    async def _swap(self, record: ApprovalRecord, expected: ApprovalRecord) -> bool:
        """Replace the stored record with record only if it still has expected's state and
        runs count."""

    @abstractmethod
    async def _delete(self, record: ApprovalRecord) -> bool:
        """Delete record only if it is still stored in its state."""

    @abstractmethod
    async def _scan_due(
        self, state: ApprovalState, before: str, limit: int
    ) -> builtins.list[ApprovalRecord]:
        """Up to limit records in state requested before `before` (an `iso` time)."""

    async def _age(self, record: ApprovalRecord | None) -> ApprovalRecord | None:
        """record as it reads now: None once past its retention (and deleted), expired once
        pending past its expiry."""
        while record is not None:
            if retention_due(record, self.lifetimes.settled_retention_s):
                await self._delete(record)  # settled states never change: exact
                return None
            if not expiry_due(record, self.lifetimes.pending_expiry_s):
                return record
            expired = expire(record)
            if await self._swap(expired, record):
                log_expired(expired)
                return expired
            record = await self._load(record.approval_id)  # decided meanwhile
        return None

    async def _current(self, approval_id: str) -> ApprovalRecord | None:
        """The stored record as it reads now (`_age`)."""
        return await self._age(await self._load(approval_id))

    async def sweep(self, now: datetime | None = None) -> int:
        """Remove settled records past their retention and expire pending ones past their
        expiry; how many records it changed."""
        now = now or datetime.now(UTC)
        changed = 0
        retention_s = self.lifetimes.settled_retention_s
        if retention_s is not None:
            before = iso(now - timedelta(seconds=retention_s))
            for state in sorted(SETTLED_STATES):
                for record in await self._scan_due(state, before, SWEEP_LIMIT):
                    if retention_due(record, retention_s, now) and await self._delete(record):
                        changed += 1
        expiry_s = self.lifetimes.pending_expiry_s
        if expiry_s is not None:
            before = iso(now - timedelta(seconds=expiry_s))
            for record in await self._scan_due(ApprovalState.PENDING, before, SWEEP_LIMIT):
                if expiry_due(record, expiry_s, now):
                    expired = expire(record)
                    if await self._swap(expired, record):
                        log_expired(expired)
                        changed += 1
        if changed:
            logs.event(logs.INFO, "approval store swept", records=changed)
        return changed

    async def _maybe_sweep(self) -> None:
        """`sweep`, when the last one is sweep_interval_s ago; a failure is logged, not raised
        (the next one tries again)."""
        started = time.monotonic()
        if started - self._swept_at < self.lifetimes.sweep_interval_s:
            return
        self._swept_at = started
        try:
            await self.sweep()
        except AdapterError as exc:
            logs.event(logs.WARNING, "approval store sweep failed", error_kind=exc.kind)
