"""Approved runs live in this process, so a resume that meets one waits for its outcome.

A `running` record in a shared store cannot tell a live run from a dead one; within one
process it can. The resume that claims an approval holds its slot here until its run is
over, and every other resume of that approval in this process waits for it, then answers
from the finished record (`already_done` with the run's outcome), as the Kafka worker does.
Thread-safe: one process may drive several event loops (a fresh loop per invocation).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

__all__ = ["LiveRuns"]


class LiveRuns:
    """The approvals whose claim or run is in progress in this process, by approval id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, Future[None]] = {}

    def start(self, approval_id: str) -> bool:
        """Take approval_id's slot; False when another resume here holds it."""
        with self._lock:
            if approval_id in self._runs:
                return False
            self._runs[approval_id] = Future()
            return True

    def end(self, approval_id: str) -> None:
        """Release approval_id's slot and wake every resume waiting on it."""
        with self._lock:
            over = self._runs.pop(approval_id, None)
        if over is not None:
            over.set_result(None)

    def live(self, approval_id: str) -> bool:
        """Whether a resume in this process holds approval_id's slot now."""
        with self._lock:
            return approval_id in self._runs

    async def wait(self, approval_id: str) -> bool:
        """Wait until no resume here holds approval_id's slot; True when there was one.

        A waiter's cancellation (its time budget) leaves the run and the other waiters alone.
        """
        waited = False
        while True:
            with self._lock:
                over = self._runs.get(approval_id)
            if over is None:
                return waited
            await asyncio.shield(asyncio.wrap_future(over))
            waited = True
