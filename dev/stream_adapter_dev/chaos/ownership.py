"""Who owned which approvals partition when, from the group's assignments as each worker
process logged them, and the approved runs started by a process that did not own its call's
partition at that moment.

The evidence does not rest on the running worker's belief alone: a partition's owner changes
when the group assigns it to another process, which that process logs (aiokafka's "Setting
newly assigned partitions", before any of its work on them), and a process stops owning it
when it logs the revocation itself. A run is the demo's run journal line (running.py: process
id, call, wall-clock start); its partition is the one its call's records have in the approvals
changelog (co-partitioned with the decisions topic whose assignment is read).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .running import ToolRun

ASSIGNED, REVOKED = "assigned", "revoked"
_LINE = re.compile(
    rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?"
    rb"(Setting newly assigned partitions|Revoking previously assigned partitions) (.*)$",
    re.MULTILINE,
)

__all__ = [
    "OwnerEvent",
    "events_from_log",
    "non_owner_runs",
    "owner_at",
]


@dataclass(frozen=True, slots=True)
class OwnerEvent:
    """A process's assignment or revocation of some partitions of one topic, as it logged it."""

    at: float
    """Wall clock, seconds since the epoch."""
    pid: int
    kind: str
    partitions: frozenset[int]


def _log_time(stamp: bytes) -> float:
    """The logging module's asctime (local time, milliseconds after a comma) as epoch seconds."""
    return datetime.strptime(stamp.decode(), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def events_from_log(log: Path, lives: Sequence[tuple[int, int]], topic: str) -> list[OwnerEvent]:
    """The assignments and revocations of topic's partitions in one slot's log; lives are the
    slot's (process id, offset where its lines start), in order."""
    if not log.exists() or not lives:
        return []
    data = log.read_bytes()
    partition = re.compile(
        rb"TopicPartition\(topic='" + re.escape(topic.encode()) + rb"', partition=(\d+)\)"
    )
    out = []
    for i, (pid, start) in enumerate(lives):
        end = lives[i + 1][1] if i + 1 < len(lives) else len(data)
        for match in _LINE.finditer(data, start, end):
            kind = ASSIGNED if match.group(2).startswith(b"Setting") else REVOKED
            parts = frozenset(int(p) for p in partition.findall(match.group(3)))
            out.append(OwnerEvent(_log_time(match.group(1)), pid, kind, parts))
    return out


def owner_at(
    events: Iterable[OwnerEvent], partition: int, at: float, *, revocations: bool = True
) -> int | None:
    """The process owning partition at `at`: the last one assigned it by then, unless it has
    revoked it since (None: nobody, as during a rebalance); without `revocations`, the last
    one assigned it, whatever it did since."""
    owner = None
    for event in sorted(events, key=lambda e: e.at):
        if event.at > at:
            break
        if partition not in event.partitions:
            continue
        if event.kind == ASSIGNED:
            owner = event.pid
        elif revocations and event.pid == owner:
            owner = None
    return owner


def non_owner_runs(
    runs: Iterable[ToolRun], partition_of: Mapping[str, int], events: Sequence[OwnerEvent]
) -> tuple[list[str], list[str]]:
    """Runs (as `call_id pid (partition)`) started by a process that did not own their
    call's partition: (those after the group had assigned it to another process, or never to
    this one; those in this process's own revocation window: after it revoked the partition
    in a rebalance and before its next assignment)."""
    other, revoked = [], []
    for run in runs:
        partition = partition_of.get(run.call_id)
        if partition is None:
            other.append(f"{run.call_id} {run.pid} (no record in the changelog)")
            continue
        name = f"{run.call_id} {run.pid} (partition {partition})"
        if owner_at(events, partition, run.started_at, revocations=False) != run.pid:
            other.append(name)
        elif owner_at(events, partition, run.started_at) != run.pid:
            revoked.append(name)
    return other, revoked
