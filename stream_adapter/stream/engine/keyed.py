"""Run work concurrently across keys, one at a time in arrival order within a key (contract §9).

A slow key holds back only its own later jobs. `submit` waits while `max_queued` jobs
(running or waiting for their key) exist, which is how a full worker pushes back on its
consumer; how many *tools* run at once is the flows' limit (FlowContext.tool_slots).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable

Job = Callable[[], Awaitable[None]]


class KeyedScheduler:
    """Per-key ordering and a bound on queued asyncio jobs."""

    def __init__(self, max_queued: int, on_error: Callable[[BaseException], None]) -> None:
        self._queue = Slots(max_queued)
        self._tails: dict[Hashable, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_error = on_error

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def busy(self, key: Hashable) -> bool:
        """True while a job of key is queued or running (a later one must wait for it)."""
        return key in self._tails

    async def submit(self, key: Hashable, job: Job) -> None:
        """Queue job behind the key's previous job; wait while max_queued jobs exist."""
        await self._queue.acquire()
        previous = self._tails.get(key)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tails[key] = done
        task = asyncio.create_task(self._run(key, previous, done, job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(
        self,
        key: Hashable,
        previous: asyncio.Future[None] | None,
        done: asyncio.Future[None],
        job: Job,
    ) -> None:
        try:
            if previous is not None:
                await asyncio.shield(previous)
            await job()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a job must never take the scheduler down
            self._on_error(exc)
        finally:
            self._queue.release()
            if not done.done():
                done.set_result(None)
            if self._tails.get(key) is done:
                del self._tails[key]

    async def drain(self) -> None:
        """Wait until every submitted job has finished."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def cancel(self) -> None:
        """Cancel every job (shutdown past its grace period)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)


class Slots:
    """A FIFO counting limit whose acquire is O(1) with thousands of waiters.

    asyncio.Semaphore.locked() scans its waiters on every acquire in Python 3.11, which made
    4,096 queued jobs waiting for 64 tool slots cost more than the tools.
    """

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        """Take a slot, waiting in arrival order when none is free."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # it was handed a slot it will never use
            raise

    def release(self) -> None:
        """Give a slot back: to the longest waiter, else to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the next waiter
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()
