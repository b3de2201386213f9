"""Faust must not commit past an unfinished message at the head of a partition (SPEC §9).

faust-streaming 0.15.3's `Consumer._new_offset` looks for a gap between the committed offset
and the lowest acked one with `min(acked) - committed > 1`, but the committed offset is the
*next* offset to process: with 74 committed and 75, 76 acked, offset 74 is still running,
yet it returned 77. Found by the fuzz run (a crashed job's offset was committed over).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from faust.transport.consumer import Consumer

from stream_adapter.stream.commits import keep_head_gaps

TP = ("calls", 0)


def _consumer(committed: int | None, acked: list[int]) -> SimpleNamespace:
    from intervaltree import IntervalTree

    return SimpleNamespace(
        _acked={TP: list(acked)},
        _acked_index=defaultdict(set, {TP: set(acked)}),
        _gap=defaultdict(IntervalTree),
        _committed_offset=defaultdict(lambda: None, {TP: committed}),
    )


def test_an_unfinished_head_message_holds_the_commit() -> None:
    keep_head_gaps()
    assert Consumer._new_offset(_consumer(74, [75, 76]), TP) is None


def test_contiguous_acks_from_the_committed_offset_commit() -> None:
    keep_head_gaps()
    assert Consumer._new_offset(_consumer(74, [74, 75, 77]), TP) == 76
    assert Consumer._new_offset(_consumer(None, [0, 1]), TP) == 2
