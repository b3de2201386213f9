"""A topology for what a tool that holds on does to its worker: an async tool that blocks the
event loop (time.sleep inside async def, after one await so it runs as a scheduled task), a
sync tool that outlives its timeout in its thread, a quick sync tool, and one that answers."""

from __future__ import annotations

import asyncio
import time

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app

registry = ToolRegistry()


@registry.tool(timeout_s=2.0)
async def block(seconds: float) -> float:
    """Hold the event loop for seconds (a blocking call in an async tool)."""
    await asyncio.sleep(0)
    time.sleep(seconds)  # noqa: ASYNC251 (the point: a tool that blocks the loop)
    return seconds


@registry.tool(timeout_s=1.0)
def stuck(seconds: float) -> float:
    """Sleep in its thread for seconds, past its 1 s timeout."""
    time.sleep(seconds)
    return seconds


@registry.tool(timeout_s=5.0)
def quick(n: int) -> int:
    """A sync tool that answers at once."""
    return n


@registry.tool
async def add(a: int, b: int) -> int:
    return a + b


app = build_app(Settings(), Executor(registry, MemoryApprovalStore()))
