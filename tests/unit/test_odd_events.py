"""Odd host documents and ids: a null or non-object SQS `attributes` fails nothing but what it
must, numeric message ids count as their digits, and other id types are a clear ToolUsageError
(never an AttributeError that takes the whole invocation down)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stream_adapter import (
    Executor,
    MemoryApprovalStore,
    ToolRegistry,
    ToolUsageError,
    handle_envelope,
    parse_envelope,
    tool_handler,
)
from stream_adapter.core.ids import derive_ids
from tests.unit.aws_events import LambdaContext, eventbridge_event, sqs_event

OK = {"tool": "ok", "arguments": {"n": 1}}
PAY = {"tool": "pay", "arguments": {"cents": 5}}


@pytest.fixture
def executor() -> Executor:
    registry = ToolRegistry()

    @registry.tool
    async def ok(n: int) -> int:
        return n

    @registry.tool(confirm=True)
    async def pay(cents: int) -> int:
        return cents

    return Executor(registry, MemoryApprovalStore())


def failed(answer: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in answer["batchItemFailures"]]


@pytest.mark.parametrize("attributes", [None, "text", [], 7, {"MessageGroupId": None}])
@pytest.mark.parametrize("fifo", [False, True])
def test_odd_sqs_attributes_fail_nothing(executor: Executor, attributes: Any, fifo: bool) -> None:
    event = sqs_event([OK, OK, OK], fifo=fifo)
    event["Records"][1]["attributes"] = attributes
    del event["Records"][2]["attributes"]
    assert tool_handler(executor)(event, LambdaContext()) == {"batchItemFailures": []}


def test_a_bad_record_fails_by_its_id_and_the_rest_run(executor: Executor) -> None:
    event = sqs_event([OK, OK, OK])
    event["Records"][0]["attributes"] = None
    event["Records"][0]["body"] = None
    event["Records"][1]["body"] = {"tool": "ok"}  # not text
    answer = tool_handler(executor)(event, LambdaContext())
    assert failed(answer) == [event["Records"][0]["messageId"], event["Records"][1]["messageId"]]


def test_a_numeric_sqs_message_id_counts_as_its_digits(
    executor: Executor,
) -> None:
    event = sqs_event([PAY, {"tool": "nope", "arguments": {}}])
    event["Records"][0]["messageId"] = 1234567890123
    event["Records"][1]["messageId"] = 99
    answer = tool_handler(executor)(event, LambdaContext())
    assert failed(answer) == ["99"]
    (record,) = asyncio.run(executor.store.list())  # type: ignore[union-attr]
    assert record.message_id == "1234567890123"
    assert (record.run_id, record.call_id) == derive_ids("1234567890123", "sqs")


@pytest.mark.parametrize("message_id", [None, 1.5, True, b"raw", {"id": 1}, [1]])
def test_an_sqs_record_that_cannot_be_named_is_a_clear_error(
    executor: Executor, message_id: Any
) -> None:
    event = sqs_event([OK])
    event["Records"][0]["messageId"] = message_id
    with pytest.raises(ToolUsageError, match="messageId"):
        tool_handler(executor)(event, LambdaContext())


@pytest.mark.parametrize("event_id", [None, 17, 1.5, {"x": 1}])
def test_eventbridge_ids_never_read_none(executor: Executor, event_id: Any) -> None:
    """A null id means no delivery id (fresh ids), never the shared text "None"."""
    event = eventbridge_event(OK)
    event["id"] = event_id
    handler = tool_handler(executor)
    first, second = handler(event, LambdaContext()), handler(event, LambdaContext())
    if event_id == 17:
        assert (first["run_id"], first["call_id"]) == derive_ids("17", "eventbridge")
        assert first["call_id"] == second["call_id"]
    else:
        assert first["call_id"] != second["call_id"]
        assert (first["run_id"], first["call_id"]) != derive_ids("None", "eventbridge")


async def test_handle_envelope_takes_a_numeric_message_id(executor: Executor) -> None:
    """A Pub/Sub client's numeric messageId names the same call as its string form."""
    by_int = await handle_envelope(executor, OK, message_id=4242, source="pubsub")
    by_str = await handle_envelope(executor, OK, message_id="4242", source="pubsub")
    assert (by_int["run_id"], by_int["call_id"]) == (by_str["run_id"], by_str["call_id"])
    parked = await handle_envelope(executor, PAY, message_id=4243, source=7)
    again = await handle_envelope(executor, PAY, message_id="4243", source="7")
    assert parked == again and parked["status"] == "pending_approval"


@pytest.mark.parametrize("bad", [None, 1.5, True, b"4242", ["x"], object()])
@pytest.mark.parametrize("which", ["message_id", "source"])
async def test_other_id_types_are_refused_clearly(executor: Executor, bad: Any, which: str) -> None:
    ids: dict[str, Any] = {"message_id": "m-1", "source": "s", which: bad}
    with pytest.raises(ToolUsageError, match=which):
        parse_envelope(OK, **ids)
    with pytest.raises(ToolUsageError, match=which):
        await handle_envelope(executor, PAY, **ids)
    assert await executor.store.list() == []  # type: ignore[union-attr]
