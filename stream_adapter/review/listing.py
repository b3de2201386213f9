"""Which approvals a reviewer sees: search, pages of 50, and identical calls grouped.

Plain functions over records, so the page, its live updates and the tests agree on one rule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from stream_adapter.approvals import ApprovalRecord

__all__ = ["PAGE_SIZE", "Page", "call_signature", "identical_calls", "matches", "page_of"]

PAGE_SIZE = 50


def call_signature(record: ApprovalRecord) -> bytes:
    """The tool and its arguments, canonically encoded: equal for identical calls."""
    return orjson.dumps([record.tool, record.arguments], option=orjson.OPT_SORT_KEYS)


def identical_calls(pending: Sequence[ApprovalRecord]) -> dict[str, list[str]]:
    """For each approval with identical pending twins, their approval ids (oldest first)."""
    groups: dict[bytes, list[str]] = defaultdict(list)
    for record in pending:
        groups[call_signature(record)].append(record.approval_id)
    twins: dict[str, list[str]] = {}
    for ids in groups.values():
        if len(ids) > 1:
            for approval_id in ids:
                twins[approval_id] = [other for other in ids if other != approval_id]
    return twins


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
    found = [r for r in records if matches(r, query)]
    count = max(1, -(-len(found) // PAGE_SIZE))
    number = min(max(1, number), count)
    start = (number - 1) * PAGE_SIZE
    return Page(found[start : start + PAGE_SIZE], len(found), len(records), number, count, query)
