"""An HTTP tool server served by uvicorn in the test's own loop, on a free port."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry, create_app
from tests.services import _free_port

START_TIMEOUT_S = 30.0
REGISTRY = ToolRegistry()


@REGISTRY.tool
async def echo(text: str) -> str:
    """Says text back."""
    return text


@REGISTRY.tool(confirm=True)
async def wire_funds(amount_cents: int, to: str) -> str:
    """Moves money: a reviewer decides first."""
    return f"sent {amount_cents} to {to}"


@REGISTRY.tool(confirm=True)
async def send_invoice(customer: str, amount_cents: int) -> str:
    """Bills a customer: a reviewer decides first."""
    return f"billed {customer}"


@contextlib.asynccontextmanager
async def tool_server(**options: Any) -> AsyncIterator[str]:
    """The URL of a real HTTP tool server over REGISTRY and a memory store; `options` go to
    create_app (callers and reviewers at least)."""
    app = create_app(Executor(REGISTRY, MemoryApprovalStore()), **options)
    port = _free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        assert not task.done(), "uvicorn stopped"
        assert time.monotonic() < deadline, "uvicorn did not start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
