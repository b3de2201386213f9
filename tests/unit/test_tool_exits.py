"""Tools that raise SystemExit, KeyboardInterrupt or CancelledError fail their call (ToolFailed,
not retryable) and leave the loop that ran them, shared or fresh, serving the next call."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from stream_adapter import (
    Executor,
    LoopRunner,
    MemoryApprovalStore,
    RunSync,
    ToolFailed,
    ToolRegistry,
    handle_envelope,
    run_sync,
    tool_handler,
)
from stream_adapter.core.runners import default_runner
from tests.unit.aws_events import sqs_event

T = TypeVar("T")

EXITS = [SystemExit, KeyboardInterrupt, asyncio.CancelledError]
DEADLINE_S = 30.0
"""How long a call may take before the test calls it hung (it takes milliseconds)."""


def within_deadline(fn: Callable[[], T]) -> T:
    """fn() in a thread; fail (instead of hanging the suite) when it never returns."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("ok", fn()))
        except BaseException as exc:
            outcome.append(("raised", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert outcome, "the call never returned: the loop that ran it is gone"
    kind, value = outcome[0]
    if kind == "raised":
        raise value
    return value  # type: ignore[no-any-return]


def executor_raising(exc_type: type[BaseException], *, sync: bool) -> Executor:
    registry = ToolRegistry()

    if sync:

        @registry.tool
        def leave() -> None:
            raise exc_type()

    else:

        @registry.tool
        async def leave() -> None:
            await asyncio.sleep(0)
            raise exc_type()

    @registry.tool
    async def ok(n: int) -> int:
        return n

    return Executor(registry, MemoryApprovalStore())


LEAVE = {"tool": "leave", "arguments": {}}
OK = {"tool": "ok", "arguments": {"n": 7}}


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("exc_type", EXITS, ids=lambda e: e.__name__)
async def test_handle_envelope_turns_the_exit_into_a_failed_call(
    exc_type: type[BaseException], sync: bool
) -> None:
    executor = executor_raising(exc_type, sync=sync)
    with pytest.raises(ToolFailed) as raised:
        await handle_envelope(executor, LEAVE)
    assert raised.value.retryable is False
    assert raised.value.tool == "leave"
    assert isinstance(raised.value.original, exc_type)
    assert (await handle_envelope(executor, OK))["result"] == 7
    executor.close()


@pytest.mark.parametrize("exc_type", EXITS, ids=lambda e: e.__name__)
def test_run_sync_keeps_the_shared_loop(exc_type: type[BaseException]) -> None:
    executor = executor_raising(exc_type, sync=False)
    loop = default_runner().loop
    with pytest.raises(ToolFailed):
        within_deadline(lambda: run_sync(handle_envelope(executor, LEAVE)))
    assert within_deadline(lambda: run_sync(handle_envelope(executor, OK)))["result"] == 7
    assert default_runner().loop is loop


@pytest.mark.parametrize("runner", [None, RunSync()], ids=["shared", "fresh"])
@pytest.mark.parametrize("exc_type", EXITS, ids=lambda e: e.__name__)
def test_sqs_batch_reports_the_message_and_runs_the_rest(
    exc_type: type[BaseException], runner: RunSync | None
) -> None:
    executor = executor_raising(exc_type, sync=False)
    handler = tool_handler(executor, runner=runner)
    event = sqs_event([LEAVE, OK])
    answer = within_deadline(lambda: handler(event))
    failed = [item["itemIdentifier"] for item in answer["batchItemFailures"]]
    assert failed == [event["Records"][0]["messageId"]]
    again = within_deadline(lambda: handler(sqs_event([OK])))
    assert again == {"batchItemFailures": []}


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt])
def test_loop_runner_survives_work_that_exits(exc_type: type[BaseException]) -> None:
    """Not only tools: any work raising them reaches the caller, and the loop stays."""
    runner = LoopRunner()

    async def leave() -> None:
        raise exc_type()

    async def loop_id() -> int:
        return id(asyncio.get_running_loop())

    try:
        before = runner.run(loop_id)
        with pytest.raises(exc_type):
            within_deadline(lambda: runner.run(leave))
        assert within_deadline(lambda: runner.run(loop_id)) == before
    finally:
        runner.close()


async def test_a_cancelled_caller_is_still_cancelled() -> None:
    """A real cancellation (a worker stopping) is not mistaken for the tool's own."""
    registry = ToolRegistry()
    started = asyncio.Event()

    @registry.tool
    async def wait() -> None:
        started.set()
        await asyncio.Event().wait()

    executor = Executor(registry, MemoryApprovalStore())
    task = asyncio.create_task(handle_envelope(executor, {"tool": "wait", "arguments": {}}))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
