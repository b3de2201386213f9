"""A topology whose one tool holds the CPU without awaiting: it runs in the inline lane."""

from __future__ import annotations

import time

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app

registry = ToolRegistry()


@registry.tool
async def spin(ms: float) -> float:
    """Busy-wait ms milliseconds, never yielding to the event loop."""
    until = time.perf_counter() + ms / 1000
    while time.perf_counter() < until:
        pass
    return ms


app = build_app(Settings(), Executor(registry, MemoryApprovalStore(), tools={"spin"}))
