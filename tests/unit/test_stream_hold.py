"""Between an assignment and the recovery's seek to the committed offsets, stream partitions
that Faust resumes stay paused: a fetch round begun before the seek would hand on records
the seek then moves back before, and they would be handled twice."""

from __future__ import annotations

from faust.types import TP

from stream_adapter.stream.engine.consumer import StreamHold

CALLS, CHANGELOG = "calls", "approvals-changelog"


def test_stream_partitions_wait_for_the_seek_and_changelogs_do_not() -> None:
    hold = StreamHold()
    calls0, calls1, log0 = TP(CALLS, 0), TP(CALLS, 1), TP(CHANGELOG, 0)
    assert hold.resumable({calls0, log0}, {CHANGELOG}) == {calls0, log0}  # nothing assigned yet
    hold.assigned()
    assert hold.resumable({log0}, {CHANGELOG}) == {log0}  # recovery reads its changelogs
    assert hold.resumable({calls0, calls1, log0}, {CHANGELOG}) == {log0}
    assert hold.sought({calls0, log0}) == {calls0}  # calls1 was revoked meanwhile
    assert hold.resumable({calls1}, {CHANGELOG}) == {calls1}  # until the next assignment


def test_a_new_assignment_forgets_what_the_last_one_held() -> None:
    hold = StreamHold()
    hold.assigned()
    assert hold.resumable({TP(CALLS, 0)}, {CHANGELOG}) == set()
    hold.assigned()  # a rebalance before the seek: the next recovery resumes afresh
    assert hold.sought({TP(CALLS, 0)}) == set()
