"""Run in a child process: resume one approval whose tool waits, mid-run, for the parent.

    live_run_worker.py STORE_URL APPROVAL_ID

Prints "running" once the tool has started, waits for a line on stdin, then prints the
resume's reply as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys

from examples.backend import store_from_url
from stream_adapter import Executor, ToolRegistry, handle_envelope


def registry(started: asyncio.Event | None = None, go: asyncio.Event | None = None) -> ToolRegistry:
    """The parent's and the child's tools: one idempotent confirm tool, `pay`."""
    reg = ToolRegistry()

    @reg.tool(confirm=True, idempotent=True, timeout_s=60)
    async def pay(n: int) -> int:
        if started is not None and go is not None:
            started.set()
            await go.wait()
        return n

    return reg


async def main(url: str, approval_id: str) -> None:
    started, go = asyncio.Event(), asyncio.Event()
    store = store_from_url(url)
    executor = Executor(registry(started, go), store)
    resume = asyncio.create_task(handle_envelope(executor, {"approval_id": approval_id}))
    await started.wait()
    print("running", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    go.set()
    print(json.dumps(await resume), flush=True)
    await store.aclose()  # type: ignore[attr-defined]


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
