"""Run work concurrently across keys, one at a time in arrival order within a key (SPEC §9).

At most `max_in_flight` jobs run at once. A job waiting for its key's previous job holds no
run slot, so a slow key holds back only its own later jobs; `submit` waits only when
`max_queued` jobs (running or waiting) exist, which is how a full worker pushes back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable

Job = Callable[[], Awaitable[None]]


class KeyedScheduler:
    """Per-key ordering and a global in-flight limit for asyncio jobs."""

    def __init__(
        self,
        max_in_flight: int,
        on_error: Callable[[BaseException], None],
        *,
        max_queued: int | None = None,
    ) -> None:
        self._slots = asyncio.Semaphore(max_in_flight)
        self._queue = asyncio.Semaphore(max_queued or max(1024, 16 * max_in_flight))
        self._tails: dict[Hashable, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_error = on_error

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

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
            async with self._slots:
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
