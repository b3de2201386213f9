"""tool_handler over realistic SQS, EventBridge, MSK and direct events (contract §15)."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest

from stream_adapter import (
    Executor,
    MemoryApprovalStore,
    RunSync,
    ToolFailed,
    ToolNotFound,
    ToolRegistry,
    ToolTimeout,
    ToolUsageError,
    current_call,
    parse_envelope,
    tool_handler,
)
from stream_adapter.core.approvals import ApprovalState
from stream_adapter.core.ids import derive_ids
from stream_adapter.hosts.events import EventKind, event_kind
from stream_adapter.settings import Settings
from stream_adapter.stream.engine import Delivery
from tests.unit.aws_events import LambdaContext, eventbridge_event, kafka_event, sqs_event

OK = {"tool": "ok", "arguments": {"n": 1}}
FAIL = {"tool": "fail", "arguments": {}}
HANG = {"tool": "hang", "arguments": {}}
PAY = {"tool": "pay", "arguments": {"cents": 5}}


class Calls:
    """What the test tools saw: call ids in order, and the loops they ran on."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.loops: list[int] = []


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def store() -> MemoryApprovalStore:
    return MemoryApprovalStore()


@pytest.fixture
def executor(calls: Calls, store: MemoryApprovalStore) -> Executor:
    reg = ToolRegistry()

    @reg.tool
    async def ok(n: int) -> int:
        calls.ids.append(current_call().call_id)
        calls.loops.append(id(asyncio.get_running_loop()))
        return n

    @reg.tool
    async def fail() -> None:
        calls.ids.append(current_call().call_id)
        raise RuntimeError("not retryable")

    @reg.tool
    async def hang() -> None:
        calls.ids.append(current_call().call_id)
        await asyncio.Event().wait()  # never done: only the time budget ends it

    @reg.tool(confirm=True)
    def pay(cents: int) -> int:
        return cents

    return Executor(reg, store)


def ids_of(event: dict[str, Any], *indexes: int) -> list[dict[str, str]]:
    return [{"itemIdentifier": event["Records"][i]["messageId"]} for i in indexes]


def test_events_are_classified() -> None:
    assert event_kind(sqs_event([OK])) is EventKind.SQS
    assert event_kind(kafka_event({0: [OK]})) is EventKind.KAFKA
    assert event_kind(kafka_event({0: [OK]}, self_managed=True)) is EventKind.KAFKA
    assert event_kind(eventbridge_event(OK)) is EventKind.EVENTBRIDGE
    assert event_kind(OK) is EventKind.DIRECT
    assert event_kind("text") is EventKind.DIRECT


def test_sqs_standard_reports_exactly_the_failed_messages(executor: Executor, calls: Calls) -> None:
    event = sqs_event([OK, FAIL, OK, "{not json", {"tool": "nope", "arguments": {}}, OK])
    result = tool_handler(executor)(event, LambdaContext())
    assert result == {"batchItemFailures": ids_of(event, 1, 3, 4)}
    assert len(calls.ids) == 4  # ok, fail, ok, ok: a failure does not stop a standard queue


def test_sqs_ids_come_from_the_message_id(executor: Executor, calls: Calls) -> None:
    event = sqs_event([OK])
    tool_handler(executor)(event, LambdaContext())
    assert calls.ids == [derive_ids(event["Records"][0]["messageId"], "sqs")[1]]


def test_sqs_fifo_stops_at_the_first_failure(executor: Executor, calls: Calls) -> None:
    event = sqs_event([OK, OK, FAIL, OK, OK], fifo=True)
    result = tool_handler(executor)(event, LambdaContext())
    assert result == {"batchItemFailures": ids_of(event, 2, 3, 4)}
    assert len(calls.ids) == 3  # nothing after the failure ran


def test_sqs_fifo_all_ok_reports_nothing(executor: Executor) -> None:
    event = sqs_event([OK, PAY, OK], fifo=True)
    assert tool_handler(executor)(event, LambdaContext()) == {"batchItemFailures": []}


def test_time_running_out_mid_batch_fails_the_unfinished_and_unreached(
    executor: Executor, calls: Calls
) -> None:
    event = sqs_event([OK, FAIL, OK, HANG, OK, OK])
    context = LambdaContext(remaining_s=1.3)  # budget: 1.3 s remaining - 1.0 s margin
    started = time.monotonic()
    result = tool_handler(executor, timeout=30)(event, context)
    elapsed = time.monotonic() - started
    assert result == {"batchItemFailures": ids_of(event, 1, 3, 4, 5)}
    assert len(calls.ids) == 4  # the two after the hang were never reached
    assert 0.25 <= elapsed < 1.0


def test_timeout_caps_the_budget_when_the_host_has_more_time(executor: Executor) -> None:
    event = sqs_event([HANG, OK])
    started = time.monotonic()
    result = tool_handler(executor, timeout=0.2)(event, LambdaContext(remaining_s=900))
    assert result == {"batchItemFailures": ids_of(event, 0, 1)}
    assert time.monotonic() - started < 1.0


def test_no_time_left_fails_everything_and_runs_nothing(executor: Executor, calls: Calls) -> None:
    event = sqs_event([OK, OK])
    result = tool_handler(executor, margin_s=2.0)(event, LambdaContext(remaining_s=1.0))
    assert result == {"batchItemFailures": ids_of(event, 0, 1)}
    assert calls.ids == []


def test_fifo_time_out_fails_the_rest(executor: Executor) -> None:
    event = sqs_event([OK, HANG, OK], fifo=True)
    result = tool_handler(executor)(event, LambdaContext(remaining_s=1.2))
    assert result == {"batchItemFailures": ids_of(event, 1, 2)}


def test_sqs_record_without_message_id_is_refused(executor: Executor) -> None:
    event = sqs_event([OK])
    del event["Records"][0]["messageId"]
    with pytest.raises(ToolUsageError):
        tool_handler(executor)(event, LambdaContext())


def test_eventbridge_returns_the_reply_with_ids_from_the_event_id(
    executor: Executor,
) -> None:
    event = eventbridge_event(OK, event_id="6a7e8feb-b491-4cf7-a9f1-bf3703467718")
    reply = tool_handler(executor)(event, LambdaContext())
    run_id, call_id = derive_ids(event["id"], "eventbridge")
    assert reply == {
        "status": "ok",
        "tool": "ok",
        "run_id": run_id,
        "call_id": call_id,
        "result": 1,
    }


def test_eventbridge_errors_raise(executor: Executor) -> None:
    handler = tool_handler(executor)
    with pytest.raises(ToolNotFound):
        handler(eventbridge_event({"tool": "nope", "arguments": {}}), LambdaContext())
    with pytest.raises(ToolFailed):
        handler(eventbridge_event(FAIL), LambdaContext())
    with pytest.raises(ToolTimeout):
        handler(eventbridge_event(HANG), LambdaContext(remaining_s=1.2))


def test_direct_invoke_uses_the_request_id(executor: Executor, store: MemoryApprovalStore) -> None:
    handler = tool_handler(executor)
    context = LambdaContext(aws_request_id="c6af9ac6-7b61-11e6-9a41-93e812345678")
    first = handler(PAY, context)
    assert first["status"] == "pending_approval"
    assert (first["run_id"], first["call_id"]) == derive_ids(context.aws_request_id, "lambda")
    again = handler(PAY, context)  # Lambda's async retry keeps the request id
    assert again == first
    assert len(asyncio.run(store.list())) == 1


def test_direct_invoke_without_context_gets_fresh_ids(executor: Executor) -> None:
    handler = tool_handler(executor)
    assert handler(OK)["run_id"] != handler(OK)["run_id"]
    with pytest.raises(ToolUsageError):
        handler({"tool": "ok", "arguments": {"n": 1}, "approved": True})


def test_msk_runs_every_partition_and_reports_success(executor: Executor, calls: Calls) -> None:
    event = kafka_event({0: [OK, OK], 3: [OK, OK, OK]})
    assert tool_handler(executor)(event, LambdaContext()) == {"batchItemFailures": []}
    expected = {derive_ids(f"tool-calls:{p}:{o}", "kafka")[1] for p, o in
                [(0, 100), (0, 101), (3, 100), (3, 101), (3, 102)]}  # fmt: skip
    assert set(calls.ids) == expected


def test_msk_ids_are_the_topologys_ids(executor: Executor, store: MemoryApprovalStore) -> None:
    event = kafka_event({2: [PAY]}, first_offset=41)
    tool_handler(executor)(event, LambdaContext())
    (record,) = asyncio.run(store.list(ApprovalState.PENDING))
    raw = event["records"]["tool-calls-2"][0]
    delivery = Delivery("tool-calls", 2, 41, None, base64.b64decode(raw["value"]))
    in_topology = parse_envelope(
        delivery.value, message_id=delivery.message_id, source=Settings().source
    )
    assert (record.run_id, record.call_id) == (in_topology.run_id, in_topology.call_id)
    assert record.message_id == delivery.message_id == "tool-calls:2:41"


def test_msk_failure_raises_so_lambda_retries_the_batch(executor: Executor, calls: Calls) -> None:
    handler = tool_handler(executor)
    with pytest.raises(ToolFailed):
        handler(kafka_event({0: [OK, FAIL, OK]}), LambdaContext())
    assert len(calls.ids) == 2  # the partition stopped at its failure
    bad = kafka_event({0: [OK]}, self_managed=True)
    bad["records"]["tool-calls-0"][0]["value"] = "%%% not base64"
    with pytest.raises(ToolUsageError):
        handler(bad, LambdaContext())


def test_msk_out_of_time_raises_tool_timeout(executor: Executor) -> None:
    with pytest.raises(ToolTimeout):
        tool_handler(executor)(kafka_event({0: [OK], 1: [HANG]}), LambdaContext(remaining_s=1.2))


def test_warm_loop_by_default_fresh_loop_with_run_sync(executor: Executor, calls: Calls) -> None:
    warm = tool_handler(executor)
    warm(OK)
    warm(OK)
    assert calls.loops[0] == calls.loops[1]
    fresh = tool_handler(executor, runner=RunSync())
    loops: list[int] = []
    for _ in range(2):
        fresh(OK)
        loops.append(calls.loops[-1])
    assert calls.loops[0] not in loops


def test_allow_list_applies(executor: Executor) -> None:
    with pytest.raises(ToolNotFound):
        tool_handler(executor, tools={"pay"})(OK, LambdaContext())
