"""The inline lane exactly once: replies batched per input partition's transaction, a pause
that holds sends while a commit takes the acked offsets, and `settled` for the jobs that
follow a partition's inline calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import orjson

from stream_adapter import MemoryApprovalStore, ToolRegistry
from stream_adapter.core.executor import Executor
from stream_adapter.core.retries import RetryPolicy
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.settings import Settings
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.engine import RecordBatch
from stream_adapter.stream.inline import InlineCalls
from tests.harness import wait_for

TOPIC = "calls"


class _Sender:
    """Stands in for the engine's BatchSender: records each batch handed on, acked by hand."""

    exactly_once = True

    def __init__(self) -> None:
        self.sent: list[tuple[tuple[str, int] | None, int, asyncio.Future[Any]]] = []

    async def partition_count(self, topic: str) -> int:
        return 4

    def batch(self, size_bytes: int, *, transactional: bool = False) -> RecordBatch:
        assert transactional  # exactly once, every batch joins a transaction
        return RecordBatch(size_bytes, transactional=True)

    def unsent(self, topic: str, partitions: Any, source: Any = None) -> set[int]:
        return set()

    async def send(
        self, batch: Any, topic: str, partition: int, source: tuple[str, int] | None = None
    ) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append((source, partition, fut))
        return fut


def _ctx() -> FlowContext:
    reg = ToolRegistry()

    @reg.tool
    async def echo(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    settings = Settings.for_app("inline-eos", processing_guarantee="exactly_once")
    return FlowContext(
        settings=settings,
        executor=Executor(reg, MemoryApprovalStore()),
        tools=None,
        outputs=SimpleNamespace(),  # type: ignore[arg-type]
        policy=RetryPolicy(attempts=1, base_s=0),
        keys=DecisionKeys.parse(""),
    )


def _message(partition: int, offset: int) -> Any:
    value = orjson.dumps({"tool": "echo", "arguments": {"n": offset}})
    return SimpleNamespace(topic=TOPIC, partition=partition, offset=offset, key=b"k", value=value)


async def _lane() -> tuple[InlineCalls, _Sender, list[Any], list[Any]]:
    sender, acked, redone = _Sender(), [], []
    lane = InlineCalls(
        _ctx(),
        sender,
        ack=acked.extend,
        redo=lambda m, exc: redone.append(m),  # type: ignore[arg-type]
    )
    await lane.start()
    return lane, sender, acked, redone


async def _until(check: Callable[[], bool]) -> None:
    await wait_for(check, timeout_s=5, what="the lane", interval_s=0.001)


async def test_replies_go_into_their_input_partitions_transactions_and_settle_per_partition() -> (
    None
):
    lane, sender, acked, _ = await _lane()
    first, second, other = _message(0, 10), _message(0, 11), _message(1, 5)
    for message in (first, second, other):
        assert lane.offer(message, (TOPIC, message.partition, b"k")) is None
    settled = lane.settled(TOPIC, 0)
    assert settled is not None and lane.settled(TOPIC, 2) is None
    await lane.flush()
    # Batches per input partition and reply partition: a batch joins one transaction.
    slots = [(source, partition) for source, partition, _ in sender.sent]
    assert {source for source, _ in slots} == {(TOPIC, 0), (TOPIC, 1)}
    assert len(slots) == len(set(slots))
    for source, _, fut in sender.sent:
        if source == (TOPIC, 0):
            fut.set_result(None)
    await _until(settled.done)
    assert acked == [first, second]
    assert lane.settled(TOPIC, 0) is None and lane.settled(TOPIC, 1) is not None


async def test_a_pause_waits_for_the_batches_in_flight_and_sends_nothing_until_it_ends() -> None:
    lane, sender, acked, _ = await _lane()
    early, late = _message(0, 1), _message(0, 2)
    assert lane.offer(early, (TOPIC, 0, b"a")) is None
    await lane.flush(wait=False)
    assert len(sender.sent) == 1
    entered = asyncio.Event()
    leave = asyncio.Event()

    async def commit() -> None:
        async with lane.paused():
            entered.set()
            await leave.wait()

    committing = asyncio.ensure_future(commit())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not entered.is_set(), "a commit took the offsets while a batch was in flight"
    assert lane.offer(late, (TOPIC, 0, b"b")) is None  # calls are still taken meanwhile
    await lane.flush(wait=False)
    assert len(sender.sent) == 1, "a batch went out during a commit"
    sender.sent[0][2].set_result(None)
    await asyncio.wait_for(entered.wait(), 5)
    assert acked == [early]  # the commit sees the early call acked, the late one not
    await lane.flush(wait=False)
    assert len(sender.sent) == 1
    leave.set()
    await asyncio.wait_for(committing, 5)
    await _until(lambda: len(sender.sent) == 2)  # held replies go once the commit is done
    sender.sent[1][2].set_result(None)
    await _until(lambda: acked == [early, late])


async def test_a_batch_that_fails_hands_its_calls_to_redo_and_settles() -> None:
    lane, sender, acked, redone = await _lane()
    message = _message(3, 7)
    assert lane.offer(message, (TOPIC, 3, b"k")) is None
    settled = lane.settled(TOPIC, 3)
    await lane.flush()
    sender.sent[0][2].set_exception(RuntimeError("fenced"))
    assert settled is not None
    await _until(settled.done)
    assert redone == [message] and acked == []
