"""Between an assignment and the recovery's seek to the committed offsets, stream partitions
that Faust resumes stay paused: a fetch round begun before the seek would hand on records
the seek then moves back before, and they would be handled twice."""

from __future__ import annotations

from faust.types import TP

from stream_adapter.stream.engine.consumer import StreamHold

CALLS, CHANGELOG = "calls", "approvals-changelog"


def _seek(hold: StreamHold, assignment: set[TP]) -> set[TP]:
    """A whole seek with no other running: what it resumes."""
    ticket = hold.seek_begins()
    hold.seek_ended(ticket)
    return hold.release(assignment)


def test_stream_partitions_wait_for_the_seek_and_changelogs_do_not() -> None:
    hold = StreamHold()
    calls0, calls1, log0 = TP(CALLS, 0), TP(CALLS, 1), TP(CHANGELOG, 0)
    assert hold.resumable({calls0, log0}, {CHANGELOG}) == {calls0, log0}  # nothing assigned yet
    hold.assigned()
    assert hold.resumable({log0}, {CHANGELOG}) == {log0}  # recovery reads its changelogs
    assert hold.resumable({calls0, calls1, log0}, {CHANGELOG}) == {log0}
    assert _seek(hold, {calls0, log0}) == {calls0}  # calls1 was revoked meanwhile
    assert hold.resumable({calls1}, {CHANGELOG}) == {calls1}  # until the next assignment


def test_a_new_assignment_forgets_what_the_last_one_held() -> None:
    hold = StreamHold()
    hold.assigned()
    assert hold.resumable({TP(CALLS, 0)}, {CHANGELOG}) == set()
    hold.assigned()  # a rebalance before the seek: the next recovery resumes afresh
    assert _seek(hold, {TP(CALLS, 0)}) == set()


def test_only_a_seek_begun_after_the_partitions_were_held_releases_them() -> None:
    # A seek back to the committed offsets (a fetch returned while the flow was stopped)
    # began during a rebalance and ended after the next assignment; it released the stream
    # partitions before the recovery's own seek, which then moved them back under records
    # already handled (an exactly-once chaos run at seed 11, docs/chaos.md).
    hold = StreamHold()
    calls0 = TP(CALLS, 0)
    early = hold.seek_begins()  # before the assignment
    hold.assigned()
    during_recovery = hold.seek_begins()  # after it, before the recovery asked for streams
    hold.seek_ended(early)
    hold.seek_ended(during_recovery)
    assert hold.release({calls0}) == set()
    assert hold.resumable({calls0}, {CHANGELOG}) == set()  # still held
    recovery = hold.seek_begins()
    hold.seek_ended(recovery)
    assert hold.release({calls0}) == {calls0}


def test_a_seek_that_failed_releases_nothing_and_a_stale_ticket_counts_for_nothing() -> None:
    hold = StreamHold()
    calls0 = TP(CALLS, 0)
    hold.assigned()
    hold.resumable({calls0}, {CHANGELOG})
    failed = hold.seek_begins()
    assert failed is not None  # it never ends well: seek_ended is not called
    assert hold.release({calls0}) == set()
    stale = hold.seek_begins()
    hold.assigned()  # a rebalance while it ran
    hold.resumable({calls0}, {CHANGELOG})
    hold.seek_ended(stale)
    assert hold.release({calls0}) == set()
    assert _seek(hold, {calls0}) == {calls0}
