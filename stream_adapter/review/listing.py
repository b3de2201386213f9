"""Which approvals a reviewer sees: search, pages of 50, and identical calls grouped.

Plain functions over records, so the page, its live updates and the tests agree on one rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import orjson

from stream_adapter.core.approvals import ApprovalRecord

__all__ = [
    "PAGE_SIZE",
    "TWINS_SHOWN",
    "IdenticalCalls",
    "Page",
    "Twins",
    "call_signature",
    "matches",
    "page_of",
]

PAGE_SIZE = 50
TWINS_SHOWN = 5
"""Ids of identical pending calls named on an approval's card (the rest are counted)."""


def call_signature(record: ApprovalRecord) -> bytes:
    """The tool and its arguments, canonically encoded: equal for identical calls."""
    return orjson.dumps([record.tool, record.arguments], option=orjson.OPT_SORT_KEYS)


@dataclass(frozen=True, slots=True)
class Twins:
    """The other pending approvals with the same tool and arguments as one: how many there
    are, and the ids of the first few (oldest first)."""

    count: int = 0
    first: tuple[str, ...] = ()


NO_TWINS = Twins()


class IdenticalCalls:
    """Pending approvals grouped by call signature, kept up to date one record at a time.

    Grouping is done as records arrive, so what a card shows costs the same whatever the
    number of identical pending calls: a count and the first TWINS_SHOWN + 1 ids of a group.
    """

    def __init__(self, pending: Iterable[ApprovalRecord] = ()) -> None:
        self._signature: dict[str, bytes] = {}
        self._groups: dict[bytes, dict[str, None]] = {}
        for record in pending:
            self.add(record)

    def add(self, record: ApprovalRecord) -> None:
        """Count record as pending (it keeps its place when it was already counted)."""
        approval_id = record.approval_id
        signature = call_signature(record)
        if self._signature.get(approval_id) == signature:
            return
        self.discard(approval_id)
        self._signature[approval_id] = signature
        self._groups.setdefault(signature, {})[approval_id] = None

    def discard(self, approval_id: str) -> None:
        """Stop counting approval_id (no longer pending, or gone)."""
        signature = self._signature.pop(approval_id, None)
        if signature is None:
            return
        group = self._groups[signature]
        del group[approval_id]
        if not group:
            del self._groups[signature]

    def twins(self, approval_id: str) -> Twins:
        """The pending approvals identical to approval_id's call (none when it is not pending)."""
        signature = self._signature.get(approval_id)
        group = self._groups.get(signature) if signature is not None else None
        if group is None or len(group) < 2:
            return NO_TWINS
        first = tuple(
            other for other in itertools.islice(group, TWINS_SHOWN + 1) if other != approval_id
        )[:TWINS_SHOWN]
        return Twins(len(group) - 1, first)


def matches(record: ApprovalRecord, query: str) -> bool:
    """True when every word of query appears (case-insensitively) in the record's ids,
    tool, agent key, arguments or the worker that started its last run."""
    words = query.casefold().split()
    if not words:
        return True
    haystack = " ".join(
        [
            record.approval_id,
            record.tool,
            record.run_id,
            record.call_id,
            record.agent_key or "",
            record.started_by or "",
            orjson.dumps(record.arguments).decode(),
        ]
    ).casefold()
    return all(word in haystack for word in words)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of the records matching a query."""

    items: list[ApprovalRecord]
    matched: int
    total: int
    number: int
    count: int
    query: str

    @property
    def first(self) -> int:
        """1-based position of the first item shown (0 when none)."""
        return (self.number - 1) * PAGE_SIZE + 1 if self.items else 0

    @property
    def last(self) -> int:
        return self.first + len(self.items) - 1 if self.items else 0


def page_of(records: Sequence[ApprovalRecord], query: str = "", number: int = 1) -> Page:
    """The page number of the records matching query (clamped to the pages there are)."""
    query = query.strip()
    found = [r for r in records if matches(r, query)] if query else records
    count = max(1, -(-len(found) // PAGE_SIZE))
    number = min(max(1, number), count)
    start = (number - 1) * PAGE_SIZE
    return Page(
        list(found[start : start + PAGE_SIZE]), len(found), len(records), number, count, query
    )
