"""Commits must never pass an unfinished message at the head of a partition (SPEC §9).

faust-streaming 0.15.3's `Consumer._new_offset` detects a gap before the lowest acked offset
with `min(acked) - committed > 1`, while `committed` is the *next* offset to process: with 74
committed and 75, 76 acked (74 still running, or its job crashed), it commits 77, and a crash
then loses the call at 74. The fuzz run found it (tests/unit/test_commit_head_gap.py).

The wrapper keeps Faust's method and returns None (commit nothing yet) whenever the lowest
acked offset, after Faust's own gap filling, is above the committed one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_PATCHED = "_stream_adapter_head_gaps"


def _guarded(original: Callable[[Any, Any], int | None]) -> Callable[[Any, Any], int | None]:
    def _new_offset(self: Any, tp: Any) -> int | None:
        committed = self._committed_offset[tp]
        acked = self._acked[tp]
        gaps = self._gap[tp]
        # Faust folds broker-side gaps (transaction markers, compaction) into acked first.
        if committed is not None and acked and not gaps and min(acked) > committed:
            return None
        return original(self, tp)

    return _new_offset


def keep_head_gaps() -> None:
    """Patch Faust's consumer so a commit never skips an unacked head offset; idempotent."""
    from faust.transport.consumer import Consumer

    if not getattr(Consumer, _PATCHED, False):
        Consumer._new_offset = _guarded(Consumer._new_offset)  # type: ignore[method-assign,assignment]
        setattr(Consumer, _PATCHED, True)
