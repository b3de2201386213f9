"""The inline lane's replies: the same bytes whatever the result's size, whether the result's
JSON from the result check goes in as it is (large results) or is encoded again (small)."""

from __future__ import annotations

import enum
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiokafka.record.memory_records import MemoryRecords

from stream_adapter import ToolRegistry
from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.executor import Executor
from stream_adapter.core.replies import ok_reply
from stream_adapter.core.retries import RetryPolicy
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.settings import Settings
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.engine import RecordBatch
from stream_adapter.stream.inline import FRAGMENT_FROM_BYTES, MAX_INLINE_REPLY_BYTES, InlineCalls

TOPIC = "calls"


class Level(enum.IntEnum):
    HIGH = 3


class _Sender:
    """Stands in for the engine's BatchSender at least once: keeps each batch handed on."""

    exactly_once = False

    def __init__(self) -> None:
        self.batches: list[RecordBatch] = []

    async def partition_count(self, topic: str) -> int:
        return 1

    def batch(self, size_bytes: int, *, transactional: bool = False) -> RecordBatch:
        return RecordBatch(size_bytes)

    def unsent(self, topic: str, partitions: Any, source: Any = None) -> set[int]:
        return set()

    async def send(self, batch: RecordBatch, topic: str, partition: int, source: Any = None) -> Any:
        self.batches.append(batch)
        return SimpleNamespace(add_done_callback=lambda callback: None)


def _ctx() -> FlowContext:
    reg = ToolRegistry()

    @reg.tool
    async def echo(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    @reg.tool
    async def pair(n: int) -> Any:
        return (n, "x" * n)  # a tuple: passed by the exact walk, not the round trip

    @reg.tool
    async def level(n: int) -> Any:
        return {"level": Level.HIGH, "text": "x" * n}  # an IntEnum: accepted as its int

    return FlowContext(
        settings=Settings.for_app("inline-replies"),
        executor=Executor(reg),
        tools=None,
        outputs=SimpleNamespace(),  # type: ignore[arg-type]
        policy=RetryPolicy(attempts=1, base_s=0),
        keys=DecisionKeys.parse(""),
    )


def _values(batches: list[RecordBatch]) -> list[bytes]:
    values: list[bytes] = []
    for batch in batches:
        records = MemoryRecords(bytes(batch._builder._build())).next_batch()
        values.extend(record.value for record in records)
    return values


@pytest.mark.parametrize("size", [1, FRAGMENT_FROM_BYTES - 40, FRAGMENT_FROM_BYTES, 20_000])
async def test_a_reply_is_the_same_bytes_at_every_result_size(size: int) -> None:
    ctx, sender = _ctx(), _Sender()
    lane = InlineCalls(ctx, sender, ack=lambda m: None, redo=lambda m, e: None)  # type: ignore[arg-type]
    await lane.start()
    calls: list[dict[str, Any]] = [
        {"tool": "echo", "arguments": {"text": "é" * size, "n": [1, 2.5, None, True]}},
        {"tool": "pair", "arguments": {"n": size}},
        {"tool": "level", "arguments": {"n": size}},
    ]
    results = [calls[0]["arguments"], [size, "x" * size], {"level": 3, "text": "x" * size}]
    expected = []
    for offset, call in enumerate(calls):
        value = orjson.dumps(call)
        message = SimpleNamespace(topic=TOPIC, partition=0, offset=offset, key=None, value=value)
        assert lane.take(message, offset) is None  # run here, not handed on
        envelope = parse_envelope(
            value, message_id=f"{TOPIC}:0:{offset}", source=ctx.settings.source
        )
        reply = ok_reply(call["tool"], envelope.run_id, envelope.call_id, results[offset])
        expected.append(orjson.dumps(reply))
    await lane.flush()
    assert _values(sender.batches) == expected


async def test_a_reply_past_the_inline_limit_is_handed_on_with_its_result() -> None:
    ctx, sender = _ctx(), _Sender()
    lane = InlineCalls(ctx, sender, ack=lambda m: None, redo=lambda m, e: None)  # type: ignore[arg-type]
    await lane.start()
    arguments = {"text": "x" * MAX_INLINE_REPLY_BYTES}
    value = orjson.dumps({"tool": "echo", "arguments": arguments})
    message = SimpleNamespace(topic=TOPIC, partition=0, offset=0, key=None, value=value)
    handoff = lane.take(message, 0)
    assert handoff is not None and handoff.reply is not None
    assert handoff.reply["result"] == arguments  # the value, not its JSON
