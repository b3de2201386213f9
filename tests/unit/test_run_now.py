"""Executor.run_now: a tool that never waits, run on the caller's stack (the inline lane's
path), with the same arguments, context, errors and result checks as run_tool."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import orjson
import pytest

from stream_adapter import CallContext, ToolRegistry, current_call
from stream_adapter.core.errors import AdapterError, ToolFailed, ToolUsageError
from stream_adapter.core.executor import WAITED, Executor

IDS = {"run_id": "run_1", "call_id": "call_1"}


def _executor() -> Executor:
    registry = ToolRegistry()

    @registry.tool
    async def echo(**arguments: Any) -> dict[str, Any]:
        return arguments

    @registry.tool
    async def add(a: int, b: int) -> int:
        return a + b

    @registry.tool
    async def who(ctx: CallContext) -> list[str | None]:
        return [ctx.tool, ctx.call_id, current_call().run_id]

    @registry.tool(retry_on=(ConnectionError,))
    async def flaky() -> None:
        raise ConnectionError("secret-token-123")

    @registry.tool
    async def nan() -> float:
        return math.nan

    @registry.tool
    async def usage() -> None:
        raise ToolUsageError("bad input", status=422)

    @registry.tool
    async def stops() -> None:
        raise SystemExit(3)

    @registry.tool
    async def waits() -> str:
        await asyncio.sleep(0)
        return "late"

    return Executor(registry)


def _run(name: str, arguments: dict[str, Any] | None = None) -> Any:
    ex = _executor()
    return ex.run_now(ex.registry.get(name), arguments or {}, **IDS)


def test_results_arguments_and_context_are_run_tools() -> None:
    arguments = {"x": [1, {"y": None}]}
    result = _run("echo", arguments)
    assert result == arguments and result is not arguments
    assert _run("add", {"a": 2, "b": 3}) == 5
    assert _run("who") == ["who", "call_1", "run_1"]
    with pytest.raises(ToolUsageError) as bad:
        _run("add", {"a": "2", "b": 3})  # strict: no coercion, a 422
    assert bad.value.status == 422


def test_failures_are_mapped_as_run_tool_maps_them() -> None:
    with pytest.raises(ToolFailed) as failed:
        _run("flaky")
    assert failed.value.retryable and failed.value.call_id == "call_1"
    assert "secret-token-123" not in str(failed.value)
    assert isinstance(failed.value.original, ConnectionError)
    with pytest.raises(ToolUsageError) as usage:
        _run("usage")
    assert (usage.value.tool, usage.value.run_id) == ("usage", "run_1")
    with pytest.raises(ToolFailed) as stopped:
        _run("stops")  # a tool's SystemExit fails the call, never the worker
    assert not stopped.value.retryable
    with pytest.raises(ToolFailed, match="non-JSON-safe"):
        _run("nan")


async def test_a_tool_that_waits_after_all_is_closed_unrun() -> None:
    assert _run("waits") is WAITED


async def test_run_now_and_run_tool_agree() -> None:
    ex = _executor()
    for name, arguments in (("echo", {"k": "v"}), ("add", {"a": 1, "b": 1}), ("who", {})):
        tool = ex.registry.get(name)
        assert ex.run_now(tool, arguments, **IDS) == await ex.run_tool(tool, arguments, **IDS)
    for name in ("flaky", "usage", "stops", "nan"):
        tool = ex.registry.get(name)
        with pytest.raises(AdapterError) as now:
            ex.run_now(tool, {}, **IDS)
        with pytest.raises(AdapterError) as scheduled:
            await ex.run_tool(tool, {}, **IDS)
        assert type(now.value) is type(scheduled.value)
        assert str(now.value) == str(scheduled.value)


def test_run_now_encoded_gives_the_result_and_its_json() -> None:
    ex = _executor()
    arguments = {"x": [1, {"y": None}], "z": "é"}
    result, encoded = ex.run_now_encoded(ex.registry.get("echo"), arguments, **IDS)
    assert result == arguments and encoded == orjson.dumps(arguments)
    assert ex.run_now_encoded(ex.registry.get("add"), {"a": 2, "b": 3}, **IDS) == (5, b"5")
    assert ex.run_now_encoded(ex.registry.get("waits"), {}, **IDS) is WAITED
    with pytest.raises(ToolFailed, match="non-JSON-safe"):
        ex.run_now_encoded(ex.registry.get("nan"), {}, **IDS)
