"""Faust must not commit past an unfinished message at the head of a partition (SPEC §9),
and the bisection that finds the committable run must commit what Faust's walk would.

faust-streaming 0.15.3's `Consumer._new_offset` looks for a gap between the committed offset
and the lowest acked one with `min(acked) - committed > 1`, but the committed offset is the
*next* offset to process: with 74 committed and 75, 76 acked, offset 74 is still running,
yet it returned 77. Found by the fuzz run (a crashed job's offset was committed over).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from faust.transport.consumer import Consumer
from hypothesis import given
from hypothesis import strategies as st

from stream_adapter.stream.commits import FAUST_NEW_OFFSET, new_offset, patch_new_offset

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
    patch_new_offset()
    assert Consumer._new_offset(_consumer(74, [75, 76]), TP) is None


def test_contiguous_acks_from_the_committed_offset_commit() -> None:
    patch_new_offset()
    assert Consumer._new_offset(_consumer(74, [74, 75, 77]), TP) == 76
    assert Consumer._new_offset(_consumer(None, [0, 1]), TP) == 2


def _faust_with_head_rule(consumer: SimpleNamespace, tp: tuple[str, int]) -> int | None:
    """What the worker used before the bisection: Faust's method behind the head-gap check."""
    committed = consumer._committed_offset[tp]
    acked = consumer._acked[tp]
    if committed is not None and acked and not consumer._gap[tp] and min(acked) > committed:
        return None
    faust_new_offset = getattr(Consumer, FAUST_NEW_OFFSET)
    result: int | None = faust_new_offset(consumer, tp)
    return result


@st.composite
def _partition_state(draw: st.DrawFn) -> tuple[int | None, list[int], list[int]]:
    """A committed offset, then acked offsets and broker-side gaps above it, disjoint."""
    committed = draw(st.none() | st.integers(0, 50))
    start = committed or 0
    kinds = draw(st.lists(st.sampled_from("aag."), max_size=60))
    acked = [start + i for i, kind in enumerate(kinds) if kind == "a"]
    gaps = [start + i for i, kind in enumerate(kinds) if kind == "g"]
    order = draw(st.permutations(acked))
    return committed, list(order), gaps


@given(_partition_state())
def test_bisection_commits_what_faust_with_the_head_rule_commits(
    state: tuple[int | None, list[int], list[int]],
) -> None:
    patch_new_offset()
    committed, acked, gaps = state
    ours, theirs = _consumer(committed, acked), _consumer(committed, acked)
    for gap in gaps:
        ours._gap[TP].addi(gap, gap + 1)
        theirs._gap[TP].addi(gap, gap + 1)
    assert new_offset(ours, TP) == _faust_with_head_rule(theirs, TP)
    assert sorted(ours._acked[TP]) == sorted(theirs._acked[TP])
    assert ours._acked_index[TP] == theirs._acked_index[TP]
    assert sorted(ours._gap[TP]) == sorted(theirs._gap[TP])
