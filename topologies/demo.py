"""The reference topology (SPEC §16): demo tools served on the settings' topics.

`stream-adapter worker` runs `app`; tests and benchmarks use `TOOLS` and `build_executor`.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from stream_adapter import ApprovalStore, Executor, MemoryApprovalStore, ToolRegistry
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app

registry = ToolRegistry()


class FlakyError(RuntimeError):
    """The demo's retryable failure."""


@registry.tool
async def echo(**arguments: Any) -> dict[str, Any]:
    """Return the arguments unchanged (async: a sync tool would pay for a thread hop)."""
    return arguments


@registry.tool
async def add(a: int, b: int) -> int:
    """a + b; non-integers are a 422."""
    return a + b


@registry.tool(timeout_s=2.0)
async def sleep(seconds: float) -> dict[str, float]:
    """Sleep, then say how long (the timeout is 2 s)."""
    await asyncio.sleep(seconds)
    return {"slept": seconds}


_flaky_counts: Counter[str] = Counter()
_flaky_lock = threading.Lock()


@registry.tool(retry_on=(FlakyError,))
def flaky(key: str, fail_times: int) -> dict[str, int]:
    """Fail retryably `fail_times` times per key, then succeed with the attempt count."""
    with _flaky_lock:
        _flaky_counts[key] += 1
        attempts = _flaky_counts[key]
    if attempts <= fail_times:
        raise FlakyError(f"flaky {key} attempt {attempts}")
    return {"attempts": attempts}


@registry.tool
def boom() -> None:
    """Always fail, not retryably."""
    raise RuntimeError("boom")


def ledger_path() -> Path:
    return Path(os.environ.get("STREAM_ADAPTER_DEMO_LEDGER", "demo-ledger.jsonl"))


_ledger_lock = threading.Lock()


@registry.tool(confirm=True)
def send_invoice(customer: str, amount_cents: int) -> dict[str, Any]:
    """Needs a reviewer; appends one JSON line per run to the ledger (so runs can be counted)."""
    from stream_adapter import current_call

    line = {"call_id": current_call().call_id, "customer": customer, "amount_cents": amount_cents}
    with _ledger_lock, ledger_path().open("a") as ledger:
        ledger.write(json.dumps(line) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    return {"invoiced": customer, "amount_cents": amount_cents}


@registry.tool
def admin_reset() -> None:
    """Registered, but outside TOOLS: always ToolNotFound."""
    raise RuntimeError("admin_reset must never run")


TOOLS = frozenset({"echo", "add", "sleep", "flaky", "boom", "send_invoice"})


def build_executor(store: ApprovalStore | None = None) -> Executor:
    """A demo executor over store (in-memory when none), limited to TOOLS."""
    return Executor(registry, store or MemoryApprovalStore(), tools=TOOLS)


settings = Settings()
app = build_app(settings, build_executor(), tools=TOOLS)
