"""A topology for watching the worker's health: a tool that waits until a file exists (a real
stall), one that holds the event loop without awaiting, a confirm tool (writes the table), and
one that answers. Faust's own detector is given 2 s, so it would speak within the tests."""

from __future__ import annotations

import asyncio
import os
import time

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app

registry = ToolRegistry()


@registry.tool
async def wait_for_file(path: str) -> str:
    """Wait (awaiting, so the loop stays free) until another process creates path."""
    while not await asyncio.to_thread(os.path.exists, path):  # noqa: ASYNC110 (no event to await)
        await asyncio.sleep(0.05)
    return path


@registry.tool
async def hog(seconds: float) -> float:
    """Hold the event loop for seconds without awaiting."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return seconds


@registry.tool(confirm=True)
async def park(n: int) -> int:
    return n


@registry.tool
async def add(a: int, b: int) -> int:
    return a + b


app = build_app(
    Settings(), Executor(registry, MemoryApprovalStore()), stream_processing_timeout=2.0
)
