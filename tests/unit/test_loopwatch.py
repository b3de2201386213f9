"""An async tool that never awaits holds the event loop (its timeout cannot fire, other calls
wait). LoopWatch measures the loop's lag and names that tool at WARNING, once, even while the
tool is still holding the loop."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry, handle_envelope
from stream_adapter.stream.loopwatch import LAG_BUCKETS_S, NOT_A_TOOL, LoopWatch, executor_codes
from tests.harness import wait_for

HOLD_S = 0.8
STALL_S = 0.3
DEADLINE_S = 30.0


def spin(seconds: float, until: Callable[[], bool] = lambda: False) -> None:
    """Hold the CPU (and the calling thread's loop) for seconds, or until until() is true."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not until():
        pass


class Held:
    """An executor with tools that hold the loop, and a flag set when a warning names one."""

    def __init__(self) -> None:
        self.seen = threading.Event()
        registry = ToolRegistry()

        @registry.tool(timeout_s=0.05)
        async def hog() -> str:
            spin(HOLD_S)
            return "done"

        def logged(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            async def wrapper(**kwargs: Any) -> Any:
                return await fn(**kwargs)

            return wrapper

        @registry.tool(name="wrapped_hog")
        @logged
        async def wrapped_hog() -> str:
            spin(HOLD_S)
            return "done"

        @registry.tool
        async def hog_until_seen() -> bool:
            """Holds the loop until the watchdog has named it: a stall that would never end."""
            spin(DEADLINE_S, self.seen.is_set)
            return self.seen.is_set()

        @registry.tool
        async def polite() -> str:
            await asyncio.sleep(0.01)
            return "ok"

        self.executor = Executor(registry, MemoryApprovalStore())


class Warnings(logging.Handler):
    def __init__(self, seen: threading.Event) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.seen = seen

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if record.levelno >= logging.WARNING and getattr(record, "tool", None):
            self.seen.set()

    def named(self, level: int) -> list[str]:
        return [getattr(r, "tool", NOT_A_TOOL) for r in self.records if r.levelno == level]


@pytest.fixture
def held() -> Held:
    return Held()


@pytest.fixture
async def watch(held: Held) -> AsyncIterator[LoopWatch]:
    watch = LoopWatch(executor_codes(held.executor), interval_s=0.05, stall_s=STALL_S)
    watch.start()
    yield watch
    await watch.stop()


@pytest.fixture
def warnings(held: Held) -> Any:
    handler = Warnings(held.seen)
    logger = logging.getLogger("stream_adapter")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def call(executor: Executor, tool: str) -> Any:
    return (await handle_envelope(executor, {"tool": tool, "arguments": {}}))["result"]


async def settle(watch: LoopWatch) -> None:
    """Let the watch wake up at least twice, so the last stall has been observed."""
    woke = sum(watch.lag_counts)
    await wait_for(
        lambda: sum(watch.lag_counts) >= woke + 2, timeout_s=DEADLINE_S, what="two wake-ups"
    )


async def test_the_tool_holding_the_loop_is_named_once(
    held: Held, watch: LoopWatch, warnings: Warnings
) -> None:
    polite = asyncio.create_task(call(held.executor, "polite"))
    assert await call(held.executor, "hog") == "done"  # its 0.05 s timeout could not fire
    await settle(watch)  # back to the loop: the next hold is a stall of its own
    assert await call(held.executor, "hog") == "done"
    assert await polite == "ok"
    await settle(watch)
    assert warnings.named(logging.WARNING) == ["hog"]  # once, though it held the loop twice
    assert watch.stalls.get("hog") == 2
    late = sum(watch.lag_counts[LAG_BUCKETS_S.index(0.25) :])
    assert late >= 2 and watch.lag_sum_s >= 2 * (HOLD_S - STALL_S)


async def test_decorated_tools_are_found(held: Held, watch: LoopWatch, warnings: Warnings) -> None:
    assert await call(held.executor, "wrapped_hog") == "done"
    await settle(watch)
    assert warnings.named(logging.WARNING) == ["wrapped_hog"]


async def test_a_stall_is_named_while_it_lasts(
    held: Held, watch: LoopWatch, warnings: Warnings
) -> None:
    """The watchdog is a thread: a tool that never gives the loop back is still reported."""
    assert await call(held.executor, "hog_until_seen") is True
    assert warnings.named(logging.WARNING) == ["hog_until_seen"]


async def test_a_stall_outside_tools_is_counted_but_not_warned(
    watch: LoopWatch, warnings: Warnings
) -> None:
    asyncio.get_running_loop().call_soon(spin, HOLD_S)
    await asyncio.sleep(0)
    await settle(watch)
    assert watch.stalls == {NOT_A_TOOL: 1}
    assert warnings.named(logging.WARNING) == []
    assert warnings.named(logging.INFO) == [NOT_A_TOOL]


async def test_an_idle_loop_reports_nothing(held: Held) -> None:
    watch = LoopWatch(executor_codes(held.executor), interval_s=0.02, stall_s=5.0)
    watch.start()
    try:
        await wait_for(
            lambda: sum(watch.lag_counts) >= 10, timeout_s=DEADLINE_S, what="ten wake-ups"
        )
    finally:
        await watch.stop()
    assert watch.stalls == {}


async def test_the_watchdog_wakes_only_when_a_stall_could_be_due(held: Held) -> None:
    """Each wake-up of the watchdog thread takes the GIL from the loop: while the loop beats on
    time it looks once per half a stall past the interval, not several times per beat."""
    watch = LoopWatch(executor_codes(held.executor), interval_s=0.02, stall_s=0.2)
    looks = 0
    look = watch._look

    def counted() -> float:
        nonlocal looks
        looks += 1
        return look()

    watch._look = counted  # type: ignore[method-assign]
    watch.start()
    try:
        await wait_for(
            lambda: sum(watch.lag_counts) >= 40, timeout_s=DEADLINE_S, what="forty wake-ups"
        )
    finally:
        await watch.stop()
    beats = sum(watch.lag_counts)
    assert 1 <= looks <= beats // 3, (looks, beats)
    assert watch.stalls == {}


class Errors(logging.Handler):
    """ERROR records, and a flag set at the first one."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.tools: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.tools.append(getattr(record, "tool", NOT_A_TOOL))
        self.seen.set()


@pytest.fixture
def errors() -> Any:
    handler = Errors()
    logger = logging.getLogger("stream_adapter")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


async def test_a_hold_past_the_session_timeout_is_an_error_every_time(
    held: Held, errors: Errors
) -> None:
    """A worker's heartbeats run on the loop: past the session timeout the group drops it, and
    the call runs again elsewhere. Each such hold is named at ERROR, not only the first."""
    watch = LoopWatch(
        executor_codes(held.executor), interval_s=0.05, stall_s=0.1, session_timeout_s=0.5
    )
    watch.start()
    try:
        for _ in range(2):
            assert await call(held.executor, "hog") == "done"  # holds 0.8 s
            await settle(watch)
        await settle(watch)
        assert watch.outlived == {"hog": 2} and errors.tools == ["hog", "hog"]
        assert watch.stalls == {"hog": 2}
    finally:
        await watch.stop()


async def test_a_hold_past_the_session_timeout_is_named_while_it_lasts(
    held: Held, errors: Errors
) -> None:
    @held.executor.registry.tool
    async def hog_until_error() -> bool:
        spin(DEADLINE_S, errors.seen.is_set)
        return errors.seen.is_set()

    watch = LoopWatch(
        executor_codes(held.executor), interval_s=0.05, stall_s=0.1, session_timeout_s=0.5
    )
    watch.start()
    try:
        assert await call(held.executor, "hog_until_error") is True
        await settle(watch)
        assert errors.tools == ["hog_until_error"] and watch.outlived == {"hog_until_error": 1}
    finally:
        await watch.stop()


async def test_a_hold_shorter_than_the_session_timeout_is_no_error(
    held: Held, errors: Errors
) -> None:
    watch = LoopWatch(
        executor_codes(held.executor), interval_s=0.05, stall_s=0.1, session_timeout_s=5.0
    )
    watch.start()
    try:
        assert await call(held.executor, "hog") == "done"
        await settle(watch)
    finally:
        await watch.stop()
    assert watch.stalls == {"hog": 1} and watch.outlived == {} and errors.tools == []
