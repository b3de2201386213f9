"""A sync tool that hangs past its timeout keeps its thread; it must not take every thread,
or every other sync tool times out without having started."""

from __future__ import annotations

import asyncio
import threading

import pytest

from stream_adapter import AdapterError, Executor, ToolFailed, ToolRegistry, ToolTimeout
from tests.harness import wait_for


async def test_a_hung_sync_tool_cannot_take_every_thread() -> None:
    release = threading.Event()
    started: list[int] = []
    reg = ToolRegistry()

    @reg.tool(timeout_s=0.05)
    def hang(n: int) -> int:
        started.append(n)
        release.wait(60)
        return n

    @reg.tool(timeout_s=10)
    def quick(n: int) -> int:
        return n

    executor = Executor(reg, max_threads=4)  # at most one thread held past timeout per tool
    try:
        kinds = []
        for n in range(4):
            with pytest.raises(AdapterError) as caught:
                await executor.run_tool(reg.get("hang"), {"n": n}, run_id="r", call_id=f"c{n}")
            kinds.append(type(caught.value))
        # The first run hangs in its thread; the next ones are refused before they start.
        assert kinds == [ToolTimeout, ToolFailed, ToolFailed, ToolFailed]
        assert started == [0] and executor.threads.stuck() == {"hang": 1}
        assert await executor.run_tool(reg.get("quick"), {"n": 5}, run_id="r", call_id="q") == 5

        release.set()  # the hung run returns: its thread is free, and hang may start again
        await wait_for(lambda: not executor.threads.stuck(), timeout_s=30, what="the thread back")
        assert await executor.run_tool(reg.get("hang"), {"n": 9}, run_id="r", call_id="c9") == 9
    finally:
        release.set()
        executor.close()


async def test_a_refused_run_is_retryable_and_names_its_cause() -> None:
    release = threading.Event()
    reg = ToolRegistry()

    @reg.tool(timeout_s=0.05)
    def hang() -> None:
        release.wait(60)

    executor = Executor(reg, max_threads=8, max_stuck_threads=2)
    try:
        for n in range(2):
            with pytest.raises(ToolTimeout):
                await executor.run_tool(reg.get("hang"), {}, run_id="r", call_id=f"c{n}")
        with pytest.raises(ToolFailed) as caught:
            await executor.run_tool(reg.get("hang"), {}, run_id="r", call_id="c2")
        refused = caught.value
        assert refused.retryable and refused.status == 503 and refused.call_id == "c2"
        assert "2 of its runs are still going past their timeout" in str(refused)
    finally:
        release.set()
        executor.close()
        await asyncio.sleep(0)


def test_the_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        Executor(ToolRegistry(), max_threads=0)
    with pytest.raises(ValueError):
        Executor(ToolRegistry(), max_stuck_threads=0)
