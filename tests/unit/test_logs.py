"""A canary secret in arguments, results, error text and reasons never reaches WARNING+ logs."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from typing import Any

import pytest

from stream_adapter import (
    AdapterError,
    Executor,
    MemoryApprovalStore,
    ToolRegistry,
    configure_logging,
    handle_envelope,
    record_decision,
)
from stream_adapter.core.logs import JSONFormatter, TextFormatter, event

CANARY = "canary-7f3a9c-s3cr3t"


def canary_executor() -> Executor:
    reg = ToolRegistry()

    @reg.tool
    def leak(secret: str) -> dict[str, str]:
        return {"echo": secret}

    @reg.tool(retry_on=(ConnectionError,))
    def fail(secret: str, retry: bool) -> None:
        raise (ConnectionError if retry else ValueError)(f"failed with {secret}")

    @reg.tool
    async def bad_result(secret: str) -> Any:
        return {secret: float("nan")}

    @reg.tool(timeout_s=0.01)
    async def slow(secret: str) -> None:
        await asyncio.Event().wait()

    @reg.tool(confirm=True)
    def pay(secret: str) -> str:
        raise RuntimeError(secret)

    @reg.tool
    def number(n: int) -> int:
        return n

    return Executor(reg, MemoryApprovalStore())


async def exercise(ex: Executor) -> None:
    calls: list[Any] = [
        {"tool": "leak", "arguments": {"secret": CANARY}},
        {"tool": "fail", "arguments": {"secret": CANARY, "retry": True}},
        {"tool": "fail", "arguments": {"secret": CANARY, "retry": False}},
        {"tool": "bad_result", "arguments": {"secret": CANARY}},
        {"tool": "slow", "arguments": {"secret": CANARY}},
        {"tool": "number", "arguments": {"n": CANARY}},
        {"tool": "number", "arguments": {"n": 1, CANARY: 1}},
        {"tool": CANARY[:10], "arguments": {"secret": CANARY}},
        '{"tool": "leak", "arguments": {"secret": "' + CANARY + '"}, "extra": 1}',
        '{"tool": "leak", "arguments": {"secret": NaN, "x": "' + CANARY + '"}}',
    ]
    for payload in calls:
        with contextlib.suppress(AdapterError):
            await handle_envelope(ex, payload)
    for approved in (True, False):
        parked = await handle_envelope(ex, {"tool": "pay", "arguments": {"secret": CANARY}})
        await record_decision(
            ex, parked["approval_id"], reviewer="r", approved=approved, reason=CANARY
        )
        await record_decision(ex, parked["approval_id"], reviewer="r", approved=True, reason=CANARY)
        with contextlib.suppress(AdapterError):
            await handle_envelope(ex, {"approval_id": parked["approval_id"]})


async def test_canary_never_in_warning_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await exercise(canary_executor())
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud, "the failing calls should have logged warnings"
    formatters = [JSONFormatter(), TextFormatter(), logging.Formatter()]
    for record in loud:
        for formatter in formatters:
            assert CANARY not in formatter.format(record)
        assert CANARY not in str(record.__dict__)
    kinds = {getattr(r, "error_kind", None) for r in loud}
    assert {"ToolFailed", "ToolTimeout"} <= kinds


def test_event_drops_unsafe_fields_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    event(logging.WARNING, "w", tool="t", arguments={"x": CANARY}, reason=CANARY)
    event(logging.DEBUG, "d", tool="t", arguments={"x": 1})
    warn, debug = caplog.records
    assert warn.tool == "t" and not hasattr(warn, "arguments")  # type: ignore[attr-defined]
    assert debug.arguments == {"x": 1}  # type: ignore[attr-defined]


def test_formatters() -> None:
    record = logging.LogRecord("stream_adapter", logging.WARNING, __file__, 1, "m", None, None)
    record.sa_fields = {"tool": "t", "run_id": "r"}
    body = json.loads(JSONFormatter().format(record))
    assert {"ts", "level", "logger", "message", "tool", "run_id"} <= body.keys()
    assert TextFormatter().format(record).endswith(" tool=t run_id=r")
    try:
        raise ValueError(CANARY)
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert CANARY not in TextFormatter().format(record)
    assert CANARY not in JSONFormatter().format(record)


def test_configure_logging_is_idempotent() -> None:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    try:
        configure_logging("DEBUG", "json")
        configure_logging("INFO", "text")
        ours = [h for h in root.handlers if getattr(h, "_stream_adapter", False)]
        assert len(ours) == 1 and isinstance(ours[0].formatter, TextFormatter)
        assert root.level == logging.INFO
        stream = io.StringIO()
        ours[0].setStream(stream)  # type: ignore[attr-defined]
        event(logging.WARNING, "hello", tool="t")
        assert "hello" in stream.getvalue() and "tool=t" in stream.getvalue()
    finally:
        for h in list(root.handlers):
            if getattr(h, "_stream_adapter", False):
                root.removeHandler(h)
        root.setLevel(before[1])
