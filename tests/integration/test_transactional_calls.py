"""Calls produced in transactions (contract §8, §9): each transaction leaves a marker at an offset
the worker never receives. The commit must step over markers, and only over markers: never
over a call still running, and never stall on a marker it starts from. A call of an aborted
transaction never runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from stream_adapter.settings import Settings
from tests.harness import Client, Sent, WorkerProcess, unique, wait_for

PARTITION = 0


@asynccontextmanager
async def _transactional(settings: Settings) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, transactional_id=unique("agent")
    )
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


async def _in_transaction(
    producer: AIOKafkaProducer, client: Client, calls: list[tuple[str, dict[str, Any]]]
) -> list[Sent]:
    """Produce calls to one partition in one transaction; its marker follows the last."""
    topic = client.settings.calls_topic
    async with producer.transaction():
        futures = [
            await producer.send(
                topic,
                orjson.dumps({"tool": tool, "arguments": arguments}),
                key=unique("k").encode(),
                partition=PARTITION,
            )
            for tool, arguments in calls
        ]
    return [client.sent(PARTITION, (await fut).offset) for fut in futures]


async def _committed(settings: Settings) -> int | None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=settings.app_id,
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        offset: int | None = await consumer.committed(
            TopicPartition(settings.calls_topic, PARTITION)
        )
        return offset
    finally:
        await consumer.stop()


async def _wait_committed(settings: Settings, at_least: int, timeout_s: float = 30) -> int:
    found: list[int] = []

    async def check() -> bool:
        offset = await _committed(settings)
        found[:] = [offset] if offset is not None else []
        return bool(found) and found[0] >= at_least

    await wait_for(check, timeout_s=timeout_s, what=f"a commit of {at_least}", interval_s=0.1)
    return found[0]


async def test_a_commit_steps_over_a_marker_but_not_over_a_running_call(
    worker: WorkerProcess, client: Client
) -> None:
    settings = client.settings
    async with _transactional(settings) as producer:
        first = await _in_transaction(producer, client, [("echo", {"n": 1}), ("echo", {"n": 2})])
        for sent in first:
            await client.reply_for(run_id=sent.run_id)
        marker = first[-1].offset + 1
        assert await _wait_committed(settings, marker) == marker  # the commit sits on it

        running, fast = await _in_transaction(
            producer, client, [("sleep", {"seconds": 6}), ("echo", {"n": 3})]
        )
    assert running.offset == marker + 1
    await client.reply_for(run_id=fast.run_id)
    # The marker is stepped over; the sleep still running holds the commit at its offset.
    committed = await _wait_committed(settings, running.offset)
    assert not client.replies_for(run_id=running.run_id), "the sleep ended: nothing was held"
    assert committed == running.offset

    await client.reply_for(run_id=running.run_id, timeout_s=30)
    assert await _wait_committed(settings, fast.offset + 1) == fast.offset + 1


async def test_b_a_worker_starting_on_a_marker_commits_past_it(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    settings = client.settings
    first_worker = worker_factory(name="first")
    await first_worker.ready()
    async with _transactional(settings) as producer:
        first = await _in_transaction(producer, client, [("echo", {"n": 1}), ("echo", {"n": 2})])
        for sent in first:
            await client.reply_for(run_id=sent.run_id)
        marker = first[-1].offset + 1
        assert await _wait_committed(settings, marker) == marker
        assert first_worker.terminate() == 0

        second_worker = worker_factory(name="second")
        await second_worker.ready()
        later = await _in_transaction(producer, client, [("echo", {"n": 3}), ("echo", {"n": 4})])
    for sent in later:
        await client.reply_for(run_id=sent.run_id)
    assert await _wait_committed(settings, later[-1].offset + 1) == later[-1].offset + 1


async def test_c_calls_of_an_aborted_transaction_never_run(
    worker: WorkerProcess, client: Client
) -> None:
    settings = client.settings
    run_id = unique("run")  # one run: both replies would share a partition, in order

    async def send(call_id: str) -> Sent:
        envelope = {"tool": "echo", "arguments": {}, "run_id": run_id, "call_id": call_id}
        fut = await producer.send(
            settings.calls_topic, orjson.dumps(envelope), key=b"A", partition=PARTITION
        )
        return client.sent(PARTITION, (await fut).offset, run_id=run_id, call_id=call_id)

    async with _transactional(settings) as producer:
        await producer.begin_transaction()
        aborted = await send("aborted")
        await producer.abort_transaction()
        async with producer.transaction():
            after = await send("after")
    await client.reply_for(call_id=after.call_id)
    assert not client.replies_for(call_id=aborted.call_id), "a call of an aborted transaction ran"
    assert await _wait_committed(settings, after.offset + 1) == after.offset + 1
