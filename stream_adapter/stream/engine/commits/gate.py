"""Exactly-once needs a commit to cover a message's outputs and its offset, or neither.

Faust commits a partition's transaction on a timer, with whatever was sent in it and the
highest *contiguous* acked offset. Two ways a reply could be committed without its offset, so
that after a crash the call runs again and a read_committed reader sees a second reply:

- the reply was sent but the call not yet acked when the timer fired: a job holds the gate
  from its first transactional send until it has acked its message, and a commit waits until
  no job is in that stretch (new jobs wait while a commit is pending, so commits are not
  starved);
- a later offset finished before an earlier one of the same partition: its offset cannot be
  committed yet, but its reply would be. So in this mode a job's outputs wait for those of the
  partition's previous message: tools still run concurrently, replies leave in offset order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar


class CommitGate:
    """Many output sections at once, or one commit."""

    def __init__(self) -> None:
        self._sections = 0
        self._no_sections = asyncio.Event()
        self._no_sections.set()
        self._no_commit = asyncio.Event()
        self._no_commit.set()
        self._commits = asyncio.Lock()

    async def enter(self) -> None:
        while not self._no_commit.is_set():
            await self._no_commit.wait()
        self._sections += 1
        self._no_sections.clear()

    def exit(self) -> None:
        self._sections -= 1
        if self._sections == 0:
            self._no_sections.set()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold off new sections, wait for the open ones to close, then run the commit."""
        async with self._commits:
            self._no_commit.clear()
            try:
                await self._no_sections.wait()
                yield
            finally:
                self._no_commit.set()


class OutputSection:
    """One job's stretch from its first transactional send to its ack, after its
    partition's previous message is done with its own."""

    __slots__ = ("_done", "_gate", "_open", "_previous")

    def __init__(self, gate: CommitGate, previous: asyncio.Future[None] | None) -> None:
        self._gate = gate
        self._previous = previous
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._open = False

    @property
    def done(self) -> asyncio.Future[None]:
        """Resolved when this job's outputs, and those of every earlier message of its
        partition, are finished (or there were none, or the job failed)."""
        return self._done

    async def open(self) -> None:
        if not self._open:
            if self._previous is not None and not self._previous.done():
                await asyncio.shield(self._previous)
            await self._gate.enter()
            self._open = True

    def close(self) -> None:
        if self._open:
            self._open = False
            self._gate.exit()
        # A job with no transactional outputs (a park request goes outside) never waited for
        # its previous message: it must not let the next one's outputs pass it.
        previous = self._previous
        if previous is not None and not previous.done():
            previous.add_done_callback(self._finish)
        else:
            self._finish()

    def _finish(self, _: object = None) -> None:
        if not self._done.done():
            self._done.set_result(None)


current_section: ContextVar[OutputSection | None] = ContextVar(
    "stream_adapter_output_section", default=None
)
"""The running job's section (exactly-once mode only)."""
