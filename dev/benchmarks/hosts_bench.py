"""Cost of tool_handler per SQS message, and of one approval's round trips per shared store.

Run: ``python dev/benchmarks/hosts_bench.py [--redis URL] [--postgres URL] [--sqlite PATH]``.
The store figures time park → decide → claim → finish (plus the gets handle_envelope does),
i.e. one confirm call's life, sequentially, on the shared warm loop.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from stream_adapter import (
    ApprovalStore,
    Executor,
    RunSync,
    ToolRegistry,
    handle_envelope,
    record_decision,
    tool_handler,
)

REGISTRY = ToolRegistry()


@REGISTRY.tool
async def noop(**arguments: Any) -> None:
    """Does nothing: the handler's own cost is what is measured."""


@REGISTRY.tool(confirm=True)
async def approve_me(n: int) -> int:
    """A confirm tool: the store's round trips are what is measured."""
    return n


def sqs_batch(size: int) -> dict[str, Any]:
    body = '{"tool":"noop","arguments":{"x":1}}'
    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "body": body,
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:calls",
            }
            for _ in range(size)
        ]
    }


def handler_us(runner: Any, batches: int, size: int) -> float:
    handler = tool_handler(Executor(REGISTRY), runner=runner)
    events = [sqs_batch(size) for _ in range(batches)]
    handler(sqs_batch(1))  # warm up (the loop, the tool's argument model)
    start = time.perf_counter()
    for event in events:
        assert handler(event) == {"batchItemFailures": []}
    return (time.perf_counter() - start) / (batches * size) * 1e6


async def approval_ms(store: ApprovalStore, n: int) -> float:
    executor = Executor(REGISTRY, store)
    start = time.perf_counter()
    for _ in range(n):
        parked = await handle_envelope(
            executor, {"tool": "approve_me", "arguments": {"n": 1}}, message_id=str(uuid.uuid4())
        )
        await record_decision(executor, parked["approval_id"], reviewer="ann", approved=True)
        await handle_envelope(executor, {"approval_id": parked["approval_id"]})
    return (time.perf_counter() - start) / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis")
    parser.add_argument("--postgres")
    parser.add_argument("--sqlite")
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    print(f"Python {platform.python_version()}, {platform.machine()}")
    print(f"tool_handler, SQS batches of 10, warm loop: {handler_us(None, 200, 10):.0f} µs/msg")
    print(
        f"tool_handler, SQS batches of 10, RunSync:   {handler_us(RunSync(), 200, 10):.0f} µs/msg"
    )
    stores: dict[str, Any] = {}
    if args.redis:
        from stream_adapter import RedisApprovalStore

        stores["redis"] = RedisApprovalStore(args.redis, namespace=f"bench-{uuid.uuid4().hex}")
    if args.postgres:
        from stream_adapter import SQLApprovalStore

        stores["postgresql"] = SQLApprovalStore(args.postgres)
    if args.sqlite:
        from stream_adapter import SQLApprovalStore

        stores["sqlite (SQL)"] = SQLApprovalStore(f"sqlite+aiosqlite:///{args.sqlite}")
    for name, store in stores.items():

        async def run(store: Any = store) -> float:
            await approval_ms(store, 5)  # warm up: connect, create the table
            try:
                return await approval_ms(store, args.n)
            finally:
                await store.aclose()

        print(f"one approval's life, {name}: {asyncio.run(run()):.2f} ms")


if __name__ == "__main__":
    main()
