"""The chaos run's evidence of ownership and table agreement, on hand-made inputs: a run by a
process the group had since assigned its partition away from counts, one by the owner not."""

from __future__ import annotations

from pathlib import Path

from stream_adapter_dev.chaos.ownership import events_from_log, non_owner_runs, owner_at
from stream_adapter_dev.chaos.running import ToolRun
from stream_adapter_dev.chaos.tables import disagreements

TOPIC = "app-decisions"
LOG = (
    "2026-12-06 10:00:00,000 INFO aiokafka.consumer.group_coordinator Setting newly assigned "
    "partitions {TopicPartition(topic='app-decisions', partition=0), "
    "TopicPartition(topic='app-calls', partition=1)} for group app\n"
)
REVOKE = (
    "2026-12-06 10:00:20,000 INFO aiokafka.consumer.group_coordinator Revoking previously "
    "assigned partitions frozenset({TopicPartition(topic='app-decisions', partition=0)}) "
    "for group app\n"
)
LATER = (
    "2026-12-06 10:00:30,000 INFO aiokafka.consumer.group_coordinator Setting newly assigned "
    "partitions {TopicPartition(topic='app-decisions', partition=0)} for group app\n"
)


def test_a_run_after_another_process_was_assigned_the_partition_counts(tmp_path: Path) -> None:
    first, second = tmp_path / "w1.log", tmp_path / "w2.log"
    first.write_text(LOG + REVOKE)
    second.write_text(LATER)
    events = events_from_log(first, [(100, 0)], TOPIC) + events_from_log(second, [(200, 0)], TOPIC)
    assert {e.partitions for e in events} == {frozenset({0})}
    t0 = events[0].at
    assert owner_at(events, 0, t0 + 10) == 100
    assert owner_at(events, 0, t0 + 25) is None  # revoked, not assigned again yet
    assert owner_at(events, 0, t0 + 25, revocations=False) == 100
    assert owner_at(events, 0, t0 + 40) == 200
    assert owner_at(events, 1, t0 + 10) is None  # another topic's partition 1 is not read
    runs = [
        ToolRun("wire_funds", "owned", "r1", 100, t0 + 10),
        ToolRun("wire_funds", "in-rebalance", "r4", 100, t0 + 25),
        ToolRun("wire_funds", "zombie", "r2", 100, t0 + 40),
        ToolRun("wire_funds", "new-owner", "r3", 200, t0 + 41),
    ]
    partitions = {"owned": 0, "in-rebalance": 0, "zombie": 0, "new-owner": 0}
    found = non_owner_runs(runs, partitions, events)
    assert found == (["zombie 100 (partition 0)"], ["in-rebalance 100 (partition 0)"])


def test_store_and_changelog_disagreements() -> None:
    latest = {b"a": b"1", b"b": None, b"c": b"3"}
    assert disagreements({b"a": b"1", b"c": b"3"}, latest) == []
    assert disagreements({b"a": b"0", b"b": b"2"}, latest) == ["a", "b", "c"]
