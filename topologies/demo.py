"""The reference topology (contract §16): demo tools served on the settings' topics.

`stream-adapter worker` runs `app`; tests and benchmarks use `TOOLS` and `build_executor`.

The confirm tools record their effects in the file `STREAM_ADAPTER_DEMO_LEDGER` names (read
at each call; default `./demo-ledger.jsonl`), one JSON line each. The chaos runs serve these
tools with a simulated latency and a run journal around each confirm run (stream-adapter-dev's
`chaos/topology.py`).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

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


LEDGER_ENV = "STREAM_ADAPTER_DEMO_LEDGER"


def ledger_path() -> Path:
    return Path(os.environ.get(LEDGER_ENV, "demo-ledger.jsonl"))


_ledger_lock = threading.Lock()


def _append_to_ledger(tool: str, fields: dict[str, Any], *, once: bool) -> bool:
    """Append one JSON line for the current call; with `once`, only if its call_id has none.

    The file lock makes the check-then-append atomic across worker processes sharing a ledger.
    """
    from stream_adapter import current_call

    call_id = current_call().call_id
    line = json.dumps({"call_id": call_id, "tool": tool, **fields})
    with _ledger_lock, ledger_path().open("a+") as ledger:
        fcntl.flock(ledger.fileno(), fcntl.LOCK_EX)
        try:
            if once:
                ledger.seek(0)
                if any(json.loads(seen).get("call_id") == call_id for seen in ledger if seen):
                    return False
            ledger.write(line + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())
            return True
        finally:
            fcntl.flock(ledger.fileno(), fcntl.LOCK_UN)


@registry.tool(confirm=True, idempotent=True)
def send_invoice(
    customer: Annotated[str, Field(description="Who is billed, as named on the invoice.")],
    amount_cents: Annotated[int, Field(description="The amount billed.")],
) -> dict[str, Any]:
    """Send an invoice to a customer (a reviewer approves each one first).

    Idempotent by call_id: the ledger gets one line per call, however often a crash makes it
    run, so a run that died with its worker is simply run again.
    """
    _append_to_ledger(
        "send_invoice", {"customer": customer, "amount_cents": amount_cents}, once=True
    )
    return {"invoiced": customer, "amount_cents": amount_cents}


@registry.tool(confirm=True)
def wire_funds(
    account: Annotated[str, Field(description="The account credited.")],
    amount_cents: Annotated[int, Field(description="The amount wired.")],
) -> dict[str, Any]:
    """Wire money to an account (a reviewer approves each transfer first).

    Not idempotent: one ledger line per run, so a second run would show. A run that died with
    its worker is never repeated automatically: its outcome is unknown until a person resolves
    it (`stream-adapter approvals resolve`).
    """
    _append_to_ledger("wire_funds", {"account": account, "amount_cents": amount_cents}, once=False)
    return {"wired": account, "amount_cents": amount_cents}


@registry.tool
def admin_reset() -> None:
    """Registered, but outside TOOLS: always ToolNotFound."""
    raise RuntimeError("admin_reset must never run")


TOOLS = frozenset({"echo", "add", "sleep", "flaky", "boom", "send_invoice", "wire_funds"})


def build_executor(store: ApprovalStore | None = None) -> Executor:
    """A demo executor over store (in-memory when none), limited to TOOLS."""
    return Executor(registry, store or MemoryApprovalStore(), tools=TOOLS)


settings = Settings()
app = build_app(settings, build_executor(), tools=TOOLS)
