"""Run async work from sync code: one warm shared loop, or a fresh loop per run."""

from __future__ import annotations

import asyncio
import atexit
import inspect
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["LoopLocal", "LoopRunner", "RunSync", "Runner", "default_runner", "run_sync"]

T = TypeVar("T")


class Runner(Protocol):
    """Runs async work from sync code: a shared LoopRunner by default, or RunSync."""

    def run(self, work: Callable[[], Awaitable[T]], *, timeout: float | None = None) -> T:
        """Run work() to completion; TimeoutError past timeout seconds."""
        ...


async def _bounded(work: Callable[[], Awaitable[T]], limit: float | None) -> T:
    async with asyncio.timeout(limit):
        return await work()


class _Exit(Exception):
    """Carries a SystemExit or KeyboardInterrupt out of the loop thread to the caller.

    Raised inside a task, either one would stop the loop itself (asyncio re-raises them out of
    run_forever): the loop's thread would die and the caller would wait forever.
    """

    def __init__(self, exc: BaseException) -> None:
        super().__init__(type(exc).__name__)
        self.exc = exc


async def _carried(work: Callable[[], Awaitable[T]], limit: float | None) -> T:
    try:
        return await _bounded(work, limit)
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Exit(exc) from None


class RunSync:
    """A Runner with a fresh event loop per run; nothing loop-bound outlives the call."""

    def run(self, work: Callable[[], Awaitable[T]], *, timeout: float | None = None) -> T:
        """Run work() on a new loop via asyncio.run."""
        return asyncio.run(_bounded(work, timeout))


class LoopRunner:
    """One event loop in a daemon thread, started on first use and kept warm.

    Clients kept in a LoopLocal stay open across runs. After a fork the child starts its
    own loop thread, since threads do not survive a fork.
    """

    def __init__(self, name: str = "stream-adapter-loop") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, started if needed."""
        with self._lock:
            if (
                self._loop is None
                or self._pid != os.getpid()
                or self._loop.is_closed()
                or self._thread is None
                or not self._thread.is_alive()
            ):
                self._start()
            assert self._loop is not None
            return self._loop

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        thread = threading.Thread(target=serve, name=self.name, daemon=True)
        thread.start()
        ready.wait()
        self._loop, self._thread, self._pid = loop, thread, os.getpid()

    def run(self, work: Callable[[], Awaitable[T]], *, timeout: float | None = None) -> T:
        """Run work() on the warm loop and wait; the work is cancelled past timeout."""
        loop = self.loop
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopRunner.run called from its own loop; await the work instead")
        future = asyncio.run_coroutine_threadsafe(_carried(work, timeout), loop)
        try:
            return future.result()
        except _Exit as carried:
            raise carried.exc from None

    def close(self) -> None:
        """Cancel what is left, stop the loop and join its thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None or self._pid != os.getpid():
            return

        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_asyncgens()

        if loop.is_running():
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
        loop.close()


_default: LoopRunner | None = None
_default_lock = threading.Lock()


def default_runner() -> LoopRunner:
    """The process's shared LoopRunner (what run_sync and tool_handler use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = LoopRunner()
            atexit.register(_default.close)
        return _default


def run_sync(
    awaitable_or_work: Awaitable[T] | Callable[[], Awaitable[T]], *, timeout: float | None = None
) -> T:
    """Run an awaitable (or a zero-argument callable returning one) on the shared loop."""
    if inspect.isawaitable(awaitable_or_work):
        awaitable = awaitable_or_work

        async def work() -> T:
            return await awaitable

        return default_runner().run(work, timeout=timeout)
    return default_runner().run(awaitable_or_work, timeout=timeout)


class LoopLocal(Generic[T]):
    """A value built lazily once per event loop (clients that must stay on their loop)."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._values: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.RLock()

    def get(self) -> T:
        """The value for the running loop, built on first use there."""
        loop = asyncio.get_running_loop()
        with self._lock:
            try:
                return self._values[loop]
            except KeyError:
                value = self._values[loop] = self._factory()
                return value

    def pop(self) -> T | None:
        """Forget (and return) the running loop's value, e.g. after closing it."""
        loop = asyncio.get_running_loop()
        with self._lock:
            return self._values.pop(loop, None)

    def __len__(self) -> int:
        return len(self._values)
