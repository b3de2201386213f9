"""The commit rule: a partition commits the end of the run of acked offsets at its head.

An acked offset above the committed one holds the commit until every offset below it is
acked or known never to be delivered (transaction markers, compacted records, recorded
exactly by the consumer): a commit never passes an unfinished call (contract §9), and
never goes back below the committed offset. This replaces
faust-streaming's `Consumer._new_offset` (engine/patches.py; why, in docs/faust-patches.md).
Acked offsets are distinct, so once sorted the run is the prefix where `acked[i] - i` is
still `acked[0]`: a bisection finds its end without a per-offset walk.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any


def _run_length(acked: list[int]) -> int:
    """How many offsets at the head of sorted, distinct `acked` are consecutive."""
    first, low, high = acked[0], 1, len(acked)
    while low < high:
        mid = (low + high) // 2
        if acked[mid] - mid == first:
            low = mid + 1
        else:
            high = mid
    return low


def new_offset(self: Any, tp: Any) -> int | None:
    """The offset to commit for tp (Faust's `Consumer._new_offset`), or None for none yet."""
    acked: list[int] = self._acked[tp]
    if not acked:
        return None
    gaps = self._gap[tp]
    if gaps:
        # Offsets never delivered below the highest acked one count as acked.
        last = max(acked)
        spans = gaps.overlap(0, last)
        if spans:
            for span in spans:
                acked.extend(range(span.begin, span.end))
            gaps.chop(0, last)
            acked[:] = set(acked)  # a gap may overlap an ack after a seek back
    acked.sort()
    committed = self._committed_offset[tp]
    if committed is not None and acked[0] < committed:
        # Acked while the commit that covers them ran (it takes them out of the index
        # before it records the new committed offset): never commit back over them.
        stale = bisect_left(acked, committed)
        self._acked_index[tp].difference_update(acked[:stale])
        del acked[:stale]
        if not acked:
            return None
    if committed is not None and acked[0] > committed:
        return None  # the head offset is not finished
    end = _run_length(acked)
    head = acked[:end]
    del acked[:end]
    self._acked_index[tp].difference_update(head)
    return head[-1] + 1
