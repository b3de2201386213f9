"""The worker's periodic sweep of its approvals table: pending approvals nobody decided in
time expire, settled ones past their retention are removed.

The sweep only asks: for each due record of the table partitions this worker actively owns
it hands a sweep request, keyed by approval_id, to the approvals flow, which checks the record
again and writes the change in order with the approval's other messages, the way every table
write goes (in the message's transaction, exactly once).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

import orjson

from stream_adapter.core import logs
from stream_adapter.core.approvals import (
    SETTLED_STATES,
    ApprovalRecord,
    ApprovalState,
    expiry_due,
    retention_due,
)
from stream_adapter.core.errors import AdapterError, ToolUsageError
from stream_adapter.settings import Settings
from stream_adapter.stream.calls import SWEEP
from stream_adapter.stream.outputs import Outputs

MAX_REQUESTS = 10_000
"""Sweep requests one round hands on at most: a backlog goes over several rounds."""
CHUNK = 5_000
"""Records judged between two turns of the event loop."""
ASK_AGAIN_ROUNDS = 5
"""Rounds after which a record still due is asked for again (its request is long done)."""

_SETTLED = frozenset(state.value for state in SETTLED_STATES)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def due_records(
    values: Iterable[bytes],
    *,
    retention_s: float | None,
    expiry_s: float | None,
    now: datetime | None = None,
) -> list[str]:
    """The approval ids among the table's values that are due: pending past expiry_s, or
    settled past retention_s. A record requested after a cutoff is skipped unparsed (it
    settled after it was requested); others are judged by the core's rules."""
    now = now or datetime.now(UTC)
    settled_before = _iso(now - timedelta(seconds=retention_s)) if retention_s else ""
    pending_before = _iso(now - timedelta(seconds=expiry_s)) if expiry_s else ""
    due = []
    for raw in values:
        try:
            fields = orjson.loads(raw)
            state, requested_at = fields["state"], fields["requested_at"]
            if state in _SETTLED:
                if not (settled_before and requested_at < settled_before):
                    continue
            elif state != ApprovalState.PENDING.value or not (
                pending_before and requested_at < pending_before
            ):
                continue
            record = ApprovalRecord.from_bytes(raw)
        except (orjson.JSONDecodeError, KeyError, TypeError, ToolUsageError):
            continue  # not a record: the flows refuse it where it matters
        if expiry_due(record, expiry_s, now) or retention_due(record, retention_s, now):
            due.append(record.approval_id)
    return due


class Sweeper:
    """Every APPROVALS_SWEEP_INTERVAL_S, asks the approvals flow to expire or remove what is
    due in this worker's active table partitions (values)."""

    def __init__(
        self, settings: Settings, values: Callable[[], Iterable[bytes]], outputs: Outputs
    ) -> None:
        self.settings = settings
        self._values = values
        self._outputs = outputs
        self._asked: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._every(), name="approvals sweep")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _every(self) -> None:
        interval_s = self.settings.approvals_sweep_interval_s
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.sweep()
            except AdapterError as exc:
                logs.event(logs.WARNING, "approvals sweep failed", error_kind=exc.kind)

    async def sweep(self) -> int:
        """One round: hand on a sweep request per due record; how many were handed on."""
        started = time.monotonic()
        again_after_s = ASK_AGAIN_ROUNDS * self.settings.approvals_sweep_interval_s
        self._asked = {k: t for k, t in self._asked.items() if started - t < again_after_s}
        values = list(self._values())  # read at once: the store may change at an await
        due: list[str] = []
        for start in range(0, len(values), CHUNK):
            due += due_records(
                values[start : start + CHUNK],
                retention_s=self.settings.settled_retention_s,
                expiry_s=self.settings.pending_expiry_s,
            )
            await asyncio.sleep(0)  # parsing 100,000 records takes about 0.2 s: let others run
        fresh = [approval_id for approval_id in due if approval_id not in self._asked]
        for approval_id in fresh[:MAX_REQUESTS]:
            await self._outputs.request(approval_id, {"kind": SWEEP, "approval_id": approval_id})
            self._asked[approval_id] = started
        if fresh:
            logs.event(logs.INFO, "approvals sweep asked", records=min(len(fresh), MAX_REQUESTS))
        return min(len(fresh), MAX_REQUESTS)
