"""A topology whose tools raise what ends a process or a task: SystemExit, KeyboardInterrupt,
CancelledError (async, sync and never-awaiting forms), and a tool that just answers."""

from __future__ import annotations

import asyncio

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app

registry = ToolRegistry()

EXITS = {"exit": SystemExit, "interrupt": KeyboardInterrupt, "cancel": asyncio.CancelledError}


def _register(name: str, exc_type: type[BaseException]) -> None:
    async def waits() -> None:
        await asyncio.sleep(0)
        raise exc_type()

    async def never_waits() -> None:
        raise exc_type()

    def sync() -> None:
        raise exc_type()

    for suffix, fn in (("async", waits), ("inline", never_waits), ("sync", sync)):
        fn.__name__ = f"{name}_{suffix}"
        registry.tool(fn)


for _name, _exc in EXITS.items():
    _register(_name, _exc)


@registry.tool
async def add(a: int, b: int) -> int:
    return a + b


app = build_app(Settings(), Executor(registry, MemoryApprovalStore()))
