"""Faust must not commit past an unfinished message at the head of a partition (contract §9),
and the bisection that finds the committable run must commit what Faust's walk would.

faust-streaming 0.15.3's `Consumer._new_offset` looks for a gap between the committed offset
and the lowest acked one with `min(acked) - committed > 1`, but the committed offset is the
*next* offset to process: with 74 committed and 75, 76 acked, offset 74 is still running,
yet it returned 77. Found by the fuzz run (a crashed job's offset was committed over).

Offsets never delivered (transaction markers, compacted records) are recorded exactly and
count as done; Faust's own gaps also counted the record after them, running or not.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from faust.transport.consumer import Consumer
from hypothesis import given
from hypothesis import strategies as st

from stream_adapter.stream.engine import patches
from stream_adapter.stream.engine.commits.offsets import new_offset

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
    patches.install()
    assert Consumer._new_offset(_consumer(74, [75, 76]), TP) is None


def test_contiguous_acks_from_the_committed_offset_commit() -> None:
    patches.install()
    assert Consumer._new_offset(_consumer(74, [74, 75, 77]), TP) == 76
    assert Consumer._new_offset(_consumer(None, [0, 1]), TP) == 2


def test_a_marker_at_the_committed_offset_is_stepped_over_but_not_the_call_after_it() -> None:
    patches.install()
    consumer = _consumer(2, [4])  # 2: a transaction's marker; 3 still runs; 4 done
    consumer._gap[TP].addi(2, 3)
    assert Consumer._new_offset(consumer, TP) == 3
    consumer._committed_offset[TP] = 3
    assert Consumer._new_offset(consumer, TP) is None
    consumer._acked[TP].append(3)
    assert Consumer._new_offset(consumer, TP) == 5


def test_offsets_acked_while_the_commit_covering_them_ran_never_take_the_commit_back() -> None:
    # Traced in an exactly-once chaos run: 91-93 committed as 94, then 91 and 92 acked again
    # (handled twice) before the consumer recorded 94; the next commit was 93.
    patches.install()
    consumer = _consumer(94, [91, 92])
    assert Consumer._new_offset(consumer, TP) is None
    assert consumer._acked[TP] == [] and consumer._acked_index[TP] == set()
    consumer = _consumer(94, [92, 95, 94])
    assert Consumer._new_offset(consumer, TP) == 96
    assert consumer._acked[TP] == [] and consumer._acked_index[TP] == set()
    assert Consumer._new_offset(_consumer(94, [93, 95]), TP) is None  # 94 still runs


def _faust_with_head_rule(consumer: SimpleNamespace, tp: tuple[str, int]) -> int | None:
    """What the worker used before the bisection: Faust's method behind the head-gap check."""
    committed = consumer._committed_offset[tp]
    acked = consumer._acked[tp]
    if committed is not None and acked and min(acked) > committed:
        return None
    faust_new_offset = patches.original(Consumer, "_new_offset")
    result: int | None = faust_new_offset(consumer, tp)
    return result


def _model(committed: int | None, acked: list[int], gaps: list[int]) -> tuple[int | None, set[int]]:
    """The rule, spelled out: (offset to commit, offsets still pending). Offsets never
    delivered below the highest acked one count as done; the commit is the end of the run of
    done offsets from the committed one (from the lowest done one before any commit)."""
    if not acked:
        return None, set()
    done = set(acked) | {gap for gap in gaps if gap < max(acked)}
    start = min(done) if committed is None else committed
    end = start
    while end in done:
        end += 1
    return (end if end > start else None), done - set(range(start, end))


@st.composite
def _partition_state(draw: st.DrawFn) -> tuple[int | None, list[int], list[int]]:
    """A committed offset, then acked offsets and never-delivered offsets above it, disjoint."""
    committed = draw(st.none() | st.integers(0, 50))
    start = committed or 0
    kinds = draw(st.lists(st.sampled_from("aag."), max_size=60))
    acked = [start + i for i, kind in enumerate(kinds) if kind == "a"]
    gaps = [start + i for i, kind in enumerate(kinds) if kind == "g"]
    order = draw(st.permutations(acked))
    return committed, list(order), gaps


@given(_partition_state())
def test_the_commit_is_the_end_of_the_done_run_from_the_committed_offset(
    state: tuple[int | None, list[int], list[int]],
) -> None:
    patches.install()
    committed, acked, gaps = state
    ours = _consumer(committed, acked)
    for gap in gaps:
        ours._gap[TP].addi(gap, gap + 1)
    ours._gap[TP].merge_overlaps()
    offset, pending = _model(committed, acked, gaps)
    assert new_offset(ours, TP) == offset
    assert set(ours._acked[TP]) == pending
    left = {o for span in ours._gap[TP] for o in range(span.begin, span.end)}
    assert left == {gap for gap in gaps if not acked or gap > max(acked)}


@given(_partition_state())
def test_without_gaps_the_bisection_commits_what_faust_with_the_head_rule_commits(
    state: tuple[int | None, list[int], list[int]],
) -> None:
    patches.install()
    committed, acked, _ = state
    ours, theirs = _consumer(committed, acked), _consumer(committed, acked)
    assert new_offset(ours, TP) == _faust_with_head_rule(theirs, TP)
    assert sorted(ours._acked[TP]) == sorted(theirs._acked[TP])
    assert ours._acked_index[TP] == theirs._acked_index[TP]
