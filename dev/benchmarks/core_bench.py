"""Per-call cost of parse_envelope and handle_envelope with a no-op tool.

Run: ``python dev/benchmarks/core_bench.py [--n 50000]``. Targets: parse < 20 µs, handle < 60 µs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from stream_adapter import Executor, ToolRegistry, handle_envelope, parse_envelope

PAYLOAD = json.dumps(
    {
        "tool": "noop",
        "arguments": {"customer": "acme-corp", "amount_cents": 12500, "note": "monthly invoice"},
        "run_id": "run_5f2c0c9e4b7a4c1d9e8f7a6b5c4d3e2f",
        "call_id": "call_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    },
    separators=(",", ":"),
).encode()
NO_IDS = b'{"tool":"noop","arguments":{"customer":"acme-corp","amount_cents":12500}}'
ESCAPED = b'{"tool":"noop","arguments":{"customer":"caf\\u00e9","amount_cents":12500}}'


def per_call(fn: Callable[[], Any], n: int) -> float:
    """Best of three runs of n calls, in microseconds per call."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


async def per_call_async(fn: Callable[[], Awaitable[Any]], n: int) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            await fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def build() -> Executor:
    reg = ToolRegistry()

    @reg.tool
    async def noop(customer: str, amount_cents: int, note: str = "") -> None:
        return None

    @reg.tool(name="noop_sync")
    def noop_sync(customer: str, amount_cents: int, note: str = "") -> None:
        return None

    return Executor(reg)


async def main(n: int) -> dict[str, float]:
    ex = build()
    sync_payload = PAYLOAD.replace(b'"noop"', b'"noop_sync"')
    figures = {
        f"parse_envelope ({len(PAYLOAD)} B, ids given)": per_call(
            lambda: parse_envelope(PAYLOAD), n
        ),
        f"parse_envelope ({len(NO_IDS)} B, ids derived)": per_call(
            lambda: parse_envelope(NO_IDS, message_id="tool-calls:3:1234", source="kafka"), n
        ),
        f"parse_envelope ({len(ESCAPED)} B, \\u escape: exact duplicate-key check)": per_call(
            lambda: parse_envelope(ESCAPED), n
        ),
        "handle_envelope, async no-op tool": await per_call_async(
            lambda: handle_envelope(ex, PAYLOAD), n
        ),
        "handle_envelope, sync no-op tool (thread hop)": await per_call_async(
            lambda: handle_envelope(ex, sync_payload), max(n // 10, 100)
        ),
    }
    ex.close()
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50_000, help="calls per measurement")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, n={args.n}")
    for name, micros in asyncio.run(main(args.n)).items():
        print(f"{micros:8.2f} µs/call  {name}")
