"""Tools and the executor: validation, timeouts, retryable errors, JSON-safe results."""

from __future__ import annotations

import asyncio
import enum
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from stream_adapter import (
    CallContext,
    Executor,
    Tool,
    ToolFailed,
    ToolNotFound,
    ToolRegistry,
    ToolTimeout,
    ToolUsageError,
    current_call,
)
from stream_adapter.core._json import MAX_DEPTH
from stream_adapter.core.executor import MAX_RESULT_BYTES

release = threading.Event()


def build() -> Executor:
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int = 0) -> int:
        return a + b

    @reg.tool
    def scale(x: float, when: datetime | None = None) -> float:
        return x * 2

    @reg.tool
    def echo(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    @reg.tool(name="slow_sync", timeout_s=0.05)
    def slow_sync() -> str:
        release.wait(5)
        return "late"

    @reg.tool(timeout_s=0.05)
    async def slow_async() -> str:
        await asyncio.Event().wait()
        return "never"

    @reg.tool(retry_on=(ConnectionError,))
    def flaky(kind: str) -> None:
        raise ConnectionError("x") if kind == "conn" else ValueError("y")

    @reg.tool
    def ret(kind: str) -> Any:
        nested: Any = []
        for _ in range(MAX_DEPTH + 1):
            nested = [nested]
        return {
            "nan": float("nan"),
            "set": {1},
            "big": "x" * MAX_RESULT_BYTES,
            "big-in-dict": {"x": "x" * MAX_RESULT_BYTES},
            "bigint": 1 << 70,
            "keys": {1: 2},
            "deep": [[[[[]]]]],
            "too-deep": {"a": nested},
            "bytes": b"x",
            "nan-in-dict": {"a": [1, float("inf")]},
            "uuid": {"id": uuid.UUID(int=1)},
            "enum": [_Color.RED],
            "int-enum": {"n": _Level.HIGH},
            "str-subclass": [_Tag("x")],
            "datetime": {"at": datetime(2026, 1, 1, tzinfo=UTC)},
            "dataclass": {"p": _Point(1, 2)},
            "tuple-in-dict": {"t": (1, "a", None)},
            "plain": {"a": [1, 2.5, True, None, "s:t"], "b": {"c": -(1 << 63)}},
        }[kind]

    @reg.tool
    async def who(ctx: CallContext) -> list[str | None]:
        assert current_call() == ctx
        return [ctx.tool, ctx.run_id, ctx.call_id, ctx.approval_id]

    @reg.tool
    def who_sync() -> str:
        return current_call().call_id

    @reg.tool
    def own_error() -> None:
        raise ToolFailed("upstream", status=503, retryable=True)

    @reg.tool
    def hidden() -> None: ...

    return Executor(reg, tools=set(reg.names()) - {"hidden"})


@pytest.fixture
def ex() -> Executor:
    return build()


async def run(ex: Executor, name: str, args: dict[str, Any] | None = None) -> Any:
    return await ex.run_tool(ex.resolve(name), args or {}, run_id="r", call_id="c")


async def test_runs_sync_and_async(ex: Executor) -> None:
    assert await run(ex, "add", {"a": 2, "b": 3}) == 5
    assert await run(ex, "add", {"a": 2}) == 2
    assert await run(ex, "echo", {"x": [1]}) == {"x": [1]}
    assert await run(ex, "scale", {"x": 2, "when": "2024-01-01T00:00:00Z"}) == 4.0


@pytest.mark.parametrize(
    "args", [{"a": "1"}, {"a": 1.5}, {"a": 1.0}, {"a": True}, {}, {"a": 1, "c": 2}, {"a": None}]
)
async def test_bad_arguments_are_422(ex: Executor, args: dict[str, Any]) -> None:
    with pytest.raises(ToolUsageError) as info:
        await run(ex, "add", args)
    assert info.value.status == 422 and info.value.tool == "add"


async def test_422_detail_names_fields_not_values(ex: Executor) -> None:
    with pytest.raises(ToolUsageError) as info:
        await run(ex, "add", {"a": "canary-value"})
    assert "a:" in info.value.detail and "canary" not in info.value.detail


async def test_unknown_and_disallowed_tools_read_the_same(ex: Executor) -> None:
    with pytest.raises(ToolNotFound) as unknown:
        ex.resolve("nope")
    with pytest.raises(ToolNotFound) as hidden:
        ex.resolve("hidden")
    with pytest.raises(ToolNotFound) as outside:
        ex.resolve("add", tools={"echo"})
    assert unknown.value.detail.replace("nope", "X") == hidden.value.detail.replace("hidden", "X")
    assert outside.value.detail.replace("add", "X") == unknown.value.detail.replace("nope", "X")
    assert ex.resolve("add", tools={"add"}).name == "add"


async def test_sync_timeout_discards_the_result(ex: Executor) -> None:
    try:
        with pytest.raises(ToolTimeout) as info:
            await run(ex, "slow_sync")
        assert info.value.retryable and info.value.status == 504
    finally:
        release.set()
        ex.close()


async def test_async_timeout(ex: Executor) -> None:
    with pytest.raises(ToolTimeout):
        await run(ex, "slow_async")


async def test_retryable_exceptions(ex: Executor) -> None:
    with pytest.raises(ToolFailed) as conn:
        await run(ex, "flaky", {"kind": "conn"})
    assert conn.value.retryable and conn.value.status == 500
    assert isinstance(conn.value.original, ConnectionError)
    assert conn.value.__cause__ is None and conn.value.__suppress_context__
    with pytest.raises(ToolFailed) as other:
        await run(ex, "flaky", {"kind": "value"})
    assert not other.value.retryable


async def test_a_tools_own_adapter_error_passes_through(ex: Executor) -> None:
    with pytest.raises(ToolFailed) as info:
        await run(ex, "own_error")
    assert (info.value.status, info.value.retryable, info.value.call_id) == (503, True, "c")


@pytest.mark.parametrize(
    "kind",
    [
        "nan",
        "set",
        "big",
        "big-in-dict",
        "bigint",
        "keys",
        "too-deep",
        "bytes",
        "nan-in-dict",
        "uuid",
        "enum",
        "datetime",
        "dataclass",
    ],
)
async def test_results_must_be_json_safe_and_small(ex: Executor, kind: str) -> None:
    with pytest.raises(ToolFailed):
        await run(ex, "ret", {"kind": kind})


@pytest.mark.parametrize("kind", ["deep", "tuple-in-dict", "plain", "int-enum", "str-subclass"])
async def test_plain_json_results_pass_unchanged(ex: Executor, kind: str) -> None:
    expected = ex.registry.get("ret").fn(kind)
    assert await run(ex, "ret", {"kind": kind}) == expected


async def test_call_context_reaches_sync_and_async_tools(ex: Executor) -> None:
    assert await run(ex, "who") == ["who", "r", "c", None]
    assert await run(ex, "who_sync") == "c"
    with pytest.raises(LookupError):
        current_call()


class _Color(enum.Enum):
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


class _Tag(str):
    pass


@dataclass
class _Point:
    x: int
    y: int


def test_registry() -> None:
    reg = ToolRegistry()

    @reg.tool(name="n", confirm=True, timeout_s=1.5, retry_on=(OSError,))
    def f(x: int) -> int:
        return x

    tool = reg.get("n")
    assert (tool.confirm, tool.timeout_s, tool.retry_on, tool.is_async) == (
        True,
        1.5,
        (OSError,),
        False,
    )
    assert reg.names() == ("n",) and "n" in reg and len(reg) == 1
    with pytest.raises(ValueError):
        reg.register(Tool("n", f))
    with pytest.raises(ToolNotFound):
        reg.get("m")


def test_unsupported_signatures() -> None:
    def positional(a: int, /) -> None: ...

    def star(*a: int) -> None: ...

    for fn in (positional, star):
        with pytest.raises(TypeError):
            Tool("x", fn)
    with pytest.raises(ValueError):
        Tool("x", lambda: None, timeout_s=0)


def test_parameter_names_may_shadow_model_attributes() -> None:
    def f(model_config: int, json: str, schema: bool) -> None: ...

    assert Tool("f", f).validate({"model_config": 1, "json": "j", "schema": True}) == {
        "model_config": 1,
        "json": "j",
        "schema": True,
    }


def test_never_waits_is_true_only_for_async_tools_without_await() -> None:
    async def quick(**arguments: Any) -> dict[str, Any]:
        return arguments

    async def waits(**arguments: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        return arguments

    async def iterates(**arguments: Any) -> int:
        async with asyncio.Lock():
            return 1

    def plain(**arguments: Any) -> int:
        return 1

    flags = {f.__name__: Tool(f.__name__, f).never_waits for f in (quick, waits, iterates, plain)}
    assert flags == {"quick": True, "waits": False, "iterates": False, "plain": False}
