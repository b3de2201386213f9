"""Event-loop lag, and which tool held the loop.

An async tool that never awaits cannot be pre-empted: while it runs, its own timeout, every
other call and the host's heartbeats wait. It can be seen, though. A small task wakes every
``interval_s`` and records how late it woke (the loop's lag); a watchdog thread notices a
stall while it lasts (even one that never ends), finds the tool on the loop thread's stack,
and logs it at WARNING once per tool. A stall that outlasts the host's session timeout (a Kafka
worker's heartbeats run on the loop, so the group drops it) is logged at ERROR every time, with
the tool: the call will run again wherever its partition goes. Hosts export the numbers
(``stream/metrics.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping
from types import CodeType, FrameType
from typing import TYPE_CHECKING

from stream_adapter.core import logs

if TYPE_CHECKING:
    from stream_adapter.core.executor import Executor

__all__ = ["LAG_BUCKETS_S", "NOT_A_TOOL", "LoopWatch", "executor_codes", "tool_codes"]

LAG_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
NOT_A_TOOL = "<none>"
"""The tool label of a stall whose stack holds no tool (the host's own code, a GC pause)."""

Codes = Mapping[CodeType, str]


def tool_codes(tools: Mapping[str, Callable[..., object]]) -> dict[CodeType, str]:
    """Code objects of tool functions (unwrapped) by tool name, to find them on a stack."""
    codes: dict[CodeType, str] = {}
    for name, fn in tools.items():
        while True:
            code = getattr(fn, "__code__", None)
            if isinstance(code, CodeType):
                codes[code] = name
            inner = getattr(fn, "__wrapped__", None)
            if inner is None:
                break
            fn = inner
    return codes


def executor_codes(executor: Executor) -> Callable[[], Codes]:
    """The `codes` of a LoopWatch for executor's registered tools."""
    registry = executor.registry
    cache: dict[int, dict[CodeType, str]] = {}

    def codes() -> Codes:
        names = registry.names()
        found = cache.get(len(names))
        if found is None:
            cache.clear()
            found = cache[len(names)] = tool_codes({n: registry.get(n).fn for n in names})
        return found

    return codes


class LoopWatch:
    """Measures the running loop's lag and names the tool behind each stall.

    ``codes`` returns the code objects to look for (read at each stall, so tools registered
    later count). A stall is a wake-up later than ``stall_s``. Everything read from outside
    (``lag_counts``, ``lag_sum_s``, ``stalls``) is plain data updated on the loop or under
    a lock.
    """

    def __init__(
        self,
        codes: Callable[[], Codes],
        *,
        interval_s: float = 0.1,
        stall_s: float = 0.5,
        session_timeout_s: float | None = None,
    ) -> None:
        if interval_s <= 0 or stall_s <= 0:
            raise ValueError("interval_s and stall_s must be positive")
        if session_timeout_s is not None and session_timeout_s <= 0:
            raise ValueError("session_timeout_s must be positive")
        self.session_timeout_s = session_timeout_s
        self._codes = codes
        self.interval_s = interval_s
        self.stall_s = stall_s
        self.lag_counts = [0] * (len(LAG_BUCKETS_S) + 1)
        """Wake-ups by lag bucket (the last one past the largest bound)."""
        self.lag_sum_s = 0.0
        self.last_lag_s = 0.0
        self.stalls: dict[str, int] = {}
        """Stalls by the tool found holding the loop (NOT_A_TOOL when none was)."""
        self.outlived: dict[str, int] = {}
        """Stalls that outlasted session_timeout_s, by tool (NOT_A_TOOL when none was)."""
        self._outlived_now = False  # this stall was reported as outliving the session
        self._lock = threading.Lock()
        self._reported: set[str] = set()
        self._beat = time.monotonic()
        self._in_stall = False
        self._suspect: tuple[float, str | None] | None = None  # (beat, tool) seen mid-stall
        self._loop_thread: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        """Start watching the running loop (call from a coroutine on it)."""
        if self._task is not None:
            return
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self._wake_up_often())
        self._thread = threading.Thread(
            target=self._watchdog, name="stream-adapter-loopwatch", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        """Stop the task and the watchdog thread."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, 5.0)

    async def _wake_up_often(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval_s
            self._beat = time.monotonic()
            await asyncio.sleep(self.interval_s)
            self._beat = time.monotonic()
            self.observe(max(0.0, loop.time() - due))

    def observe(self, lag_s: float) -> None:
        """Record one wake-up's lag; a late one the watchdog did not report is a stall too."""
        self.lag_counts[bisect_left(LAG_BUCKETS_S, lag_s)] += 1
        self.lag_sum_s += lag_s
        self.last_lag_s = lag_s
        with self._lock:
            suspect = self._suspect[1] if self._suspect is not None else None
            if lag_s >= self.stall_s and not self._in_stall:
                self._stalled(suspect, lag_s)
            if self._past_session(lag_s) and not self._outlived_now:
                self._outlived_session(suspect, lag_s)
            self._in_stall = False
            self._outlived_now = False
            self._suspect = None

    def _past_session(self, held_s: float) -> bool:
        return self.session_timeout_s is not None and held_s >= self.session_timeout_s

    def _watchdog(self) -> None:
        """Look at the loop thread's stack once it is half a stall late; report at a stall.

        It sleeps until the last beat could be that late instead of waking on a fixed tick:
        every wake-up takes the GIL from the loop thread, and on a machine whose cores are
        busy, getting it back cost the loop milliseconds each time (docs/bench.md, "The
        watchdog's wake-ups").
        """
        wait_s = self._look()
        while not self._stop.wait(wait_s):
            wait_s = self._look()

    def _look(self) -> float:
        """One look at the loop; how long until the next one can find something new."""
        half_s = self.stall_s / 2
        beat = self._beat
        held_s = time.monotonic() - beat - self.interval_s
        if held_s < half_s:
            return half_s - held_s
        with self._lock:
            if beat != self._beat:
                return 0.0  # the loop woke meanwhile: look again from its new beat
            if self._in_stall:
                if self._past_session(held_s) and not self._outlived_now:
                    suspect = self._suspect[1] if self._suspect is not None else None
                    self._outlived_session(suspect or self._tool_on_stack(), held_s)
                return half_s  # reported; the loop's next beat ends it
            if self._suspect is None or self._suspect[0] != beat:
                self._suspect = (beat, self._tool_on_stack())
            if held_s < self.stall_s:
                return self.stall_s - held_s
            self._in_stall = True
            self._stalled(self._suspect[1] or self._tool_on_stack(), held_s)
            return half_s

    def _tool_on_stack(self) -> str | None:
        """The innermost tool function on the loop thread's stack now, if any."""
        if self._loop_thread is None:
            return None
        frame: FrameType | None = sys._current_frames().get(self._loop_thread)
        codes = self._codes()
        while frame is not None:
            name = codes.get(frame.f_code)
            if name is not None:
                return name
            frame = frame.f_back
        return None

    def _outlived_session(self, tool: str | None, held_s: float) -> None:
        """Count and log (ERROR, every time) a stall past the session timeout."""
        self._outlived_now = True
        label = tool or NOT_A_TOOL
        self.outlived[label] = self.outlived.get(label, 0) + 1
        if tool is not None:
            logs.event(
                logs.ERROR,
                "tool held the event loop past the session timeout: the group drops this "
                "worker, and the call runs again wherever its partition goes",
                tool=tool,
                held_s=round(held_s, 3),
            )
        else:
            logs.event(
                logs.ERROR,
                "event loop held past the session timeout: the group drops this worker",
                held_s=round(held_s, 3),
            )

    def _stalled(self, tool: str | None, held_s: float) -> None:
        """Count a stall; log the first one of each tool at WARNING (others at DEBUG)."""
        label = tool or NOT_A_TOOL
        self.stalls[label] = self.stalls.get(label, 0) + 1
        first = label not in self._reported
        self._reported.add(label)
        if tool is not None:
            level = logs.WARNING if first else logs.DEBUG
            logs.event(level, "tool is holding the event loop", tool=tool, held_s=round(held_s, 3))
        else:
            level = logs.INFO if first else logs.DEBUG
            logs.event(level, "event loop stalled", held_s=round(held_s, 3))
