"""A run's gate is asked right before the tool's own code starts, in the tool's thread for a
sync tool: a worker that lost the partition meanwhile starts nothing, and what the gate
raises is never taken for the tool's own failure."""

from __future__ import annotations

import threading

import pytest

from stream_adapter import Executor, ToolRegistry


class Closed(Exception):
    """What the gate raises (the stream layer's OwnershipLost, in a worker)."""


@pytest.mark.parametrize("sync", [False, True])
async def test_a_closed_gate_keeps_the_tool_from_starting(sync: bool) -> None:
    started: list[str] = []
    asked_in: list[int] = []
    reg = ToolRegistry()

    if sync:

        @reg.tool(timeout_s=5)
        def pay(n: int) -> int:
            started.append("pay")
            return n

    else:

        @reg.tool
        async def pay(n: int) -> int:
            started.append("pay")
            return n

    executor = Executor(reg)
    open_ = True

    def gate() -> None:
        asked_in.append(threading.get_ident())
        if not open_:
            raise Closed("partition lost")

    tool = reg.get("pay")
    assert await executor.run_tool(tool, {"n": 1}, run_id="r", call_id="c1", gate=gate) == 1
    open_ = False
    with pytest.raises(Closed):
        await executor.run_tool(tool, {"n": 2}, run_id="r", call_id="c2", gate=gate)
    assert started == ["pay"]
    in_loop = asked_in[0] == threading.get_ident()
    assert in_loop is not sync  # a sync tool's gate is asked in the thread that runs it
    executor.close()
