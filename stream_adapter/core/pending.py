"""A cap on pending approvals per source: a flood of parks from one source is refused, typed.

Each pending approval waits for a person and is shown on the review board, so one careless or
hostile source parking without end would bury the others' calls. A worker counts the pending
approvals of its own table partitions by source as its records change, and checks the count
against MAX_PENDING_PER_SOURCE before it parks a new call. The count is rebuilt from the table
before a refusal when it is older than `rebuild_s` (records restored or handed over since are
then counted), so a refusal never rests on a stale count.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable

import orjson

from stream_adapter.core.errors import TooManyPending

__all__ = ["PendingCounts", "TooManyPending"]

_PENDING = b'"pending"'


def pending_source(raw: bytes | None) -> str | None:
    """The source of a stored approval record when it is pending, else None (cheap: no model)."""
    if raw is None or _PENDING not in raw:
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("state") != "pending":
        return None
    return str(data.get("source", ""))


class PendingCounts:
    """Pending approvals by source among the records `values()` yields, kept as they change."""

    def __init__(
        self,
        values: Callable[[], Iterable[bytes]],
        *,
        rebuild_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._values = values
        self.rebuild_s = rebuild_s
        self._clock = clock
        self._counts: Counter[str] | None = None
        self._built_at = 0.0

    def _built(self) -> Counter[str]:
        if self._counts is None:
            self.rebuild()
        assert self._counts is not None
        return self._counts

    def rebuild(self) -> None:
        """Count again from every record."""
        counts: Counter[str] = Counter()
        for raw in self._values():
            source = pending_source(raw)
            if source is not None:
                counts[source] += 1
        self._counts, self._built_at = counts, self._clock()

    def count(self, source: str) -> int:
        return self._built()[source]

    def changed(self, old: bytes | None, new: bytes | None) -> None:
        """A record went from old to new (None: absent)."""
        if self._counts is None:
            return  # counted from the table when first asked
        before, after = pending_source(old), pending_source(new)
        if before == after:
            return
        if before is not None and self._counts[before] > 0:
            self._counts[before] -= 1
        if after is not None:
            self._counts[after] += 1

    def admit(self, source: str, cap: int | None, *, tool: str | None = None) -> None:
        """TooManyPending when source already has cap pending approvals (0 or None: no cap)."""
        if not cap or self.count(source) < cap:
            return
        if self._clock() - self._built_at > self.rebuild_s:
            self.rebuild()
            if self.count(source) < cap:
                return
        raise TooManyPending(
            f"{cap} approvals of this source are pending; retry once some are decided",
            tool=tool,
        )
