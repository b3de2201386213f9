"""The threads sync tools run on, and the runs still going past their timeout.

A thread cannot be cancelled: a sync tool past its `timeout_s` gets its ToolTimeout, but its
thread runs on until the tool returns, and stays taken until then. Left alone, one tool that
hangs takes every thread of the pool in a few calls (a retried call takes one per attempt),
and then every sync tool times out without having started. So each run past its timeout is
counted, by tool, and logged; a tool with `max_stuck` runs still going is refused new ones at
once (a retryable ToolFailed, 503), which keeps threads for the other tools.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from stream_adapter.core import logs
from stream_adapter.core.errors import ToolFailed

__all__ = ["ToolThreads"]

T = TypeVar("T")


class ToolThreads:
    """A private pool of max_threads; at most max_stuck threads held past timeout per tool."""

    def __init__(self, max_threads: int, max_stuck: int | None = None) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self.max_threads = max_threads
        self.max_stuck = max(1, max_threads // 4) if max_stuck is None else max_stuck
        if self.max_stuck < 1:
            raise ValueError("max_stuck must be at least 1")
        self._lock = threading.Lock()
        self._stuck: dict[str, int] = {}
        self._pool: ThreadPoolExecutor | None = None

    def stuck(self) -> dict[str, int]:
        """Runs still going past their timeout, by tool, now."""
        with self._lock:
            return dict(self._stuck)

    async def run(self, tool: str, call: Callable[[], T], **ids: Any) -> T:
        """call() on a pool thread; a cancellation (the tool's timeout) leaves a started run
        counted until it returns, and one never started is dropped from the queue."""
        with self._lock:
            held = self._stuck.get(tool, 0)
        if held >= self.max_stuck:
            logs.event(
                logs.WARNING,
                "sync tool not started: too many of its runs are still going past their timeout",
                tool=tool,
                stuck_threads=held,
                error_kind=ToolFailed.kind,
                **ids,
            )
            raise ToolFailed(
                f"tool {tool!r} not started: {held} of its runs are still going past their timeout",
                status=503,
                retryable=True,
                tool=tool,
            )
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_threads, thread_name_prefix="sa-tool")
        future = self._pool.submit(call)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if future.cancel():
                logs.event(
                    logs.WARNING,
                    "sync tool never started: every tool thread was taken",
                    tool=tool,
                    stuck_threads=sum(self.stuck().values()),
                    max_threads=self.max_threads,
                    **ids,
                )
            elif not future.done():
                self._abandon(tool, future)
            raise

    def _abandon(self, tool: str, future: Future[Any]) -> None:
        with self._lock:
            self._stuck[tool] = self._stuck.get(tool, 0) + 1
            total = sum(self._stuck.values())
        logs.event(
            logs.WARNING,
            "sync tool still running past its timeout; its thread stays taken until it returns",
            tool=tool,
            stuck_threads=total,
            max_threads=self.max_threads,
        )
        future.add_done_callback(lambda _: self._returned(tool))

    def _returned(self, tool: str) -> None:
        with self._lock:
            left = self._stuck.get(tool, 0) - 1
            if left > 0:
                self._stuck[tool] = left
            else:
                self._stuck.pop(tool, None)
        logs.event(logs.INFO, "sync tool returned past its timeout; its thread is free", tool=tool)

    def close(self) -> None:
        """Release the pool without waiting for runs stuck past their timeout."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
