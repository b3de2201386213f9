"""Prototype of option (b), the hot path on librdkafka: the inline lane's per-call work in a
plain consume -> reply loop, on confluent-kafka or (its control) on aiokafka.

Throwaway quality: no Faust, no tables, no rebalance handling beyond the client's own, a
group of its own (in the design, assignment would follow the Faust group). Per call it does
what `InlineCalls.take` does for an echo call: the message id, the calls topic's scope, the
envelope parsed and validated with derived ids, the tool resolved (cached) and run on the
caller's stack (`Executor.run_now`), its duration observed in the worker's metrics, the
reply built and encoded, sent keyed by run_id with the contract's headers to its murmur2
partition; per batch: the replied count, flush, commit (at least once).

Run as a bench contender module (BENCH_* variables as stream_adapter_dev/bench/run.py sets them),
from dev/:
``BENCH_CLIENT=librdkafka python -m benchmarks.prototypes.lane_loop`` (or aiokafka).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import orjson

from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.errors import AdapterError
from stream_adapter.core.ids import kafka_message_id
from stream_adapter.core.replies import ok_reply
from stream_adapter.settings import Settings
from stream_adapter.stream.metrics import Metrics
from stream_adapter.stream.outputs import CONTENT_TYPE
from topologies.demo import TOOLS, build_executor

BATCH = 5000
SCOPE = "Zm9vYmFyYmF6cXV4cXV1eA"  # a topic id's text (the worker looks it up per call)


class Work:
    """The lane's per-call work, client-free: one record in, (key, value, headers) out."""

    def __init__(self) -> None:
        self.executor = build_executor()
        self.metrics = Metrics(sorted(TOOLS))
        self.tools: dict[str, Any] = {}
        self.scopes = {os.environ["BENCH_CALLS"]: SCOPE}

    def call(
        self, topic: str, partition: int, offset: int, value: bytes
    ) -> tuple[bytes, bytes, list[tuple[str, bytes]]] | None:
        message_id = kafka_message_id(topic, partition, offset)
        scope = self.scopes[topic]
        try:
            envelope = parse_envelope(value, message_id=message_id, source="kafka", scope=scope)
        except AdapterError:
            return None
        name = envelope.tool or ""
        tool = self.tools.get(name)
        if tool is None:
            tool = self.tools[name] = self.executor.resolve(name, TOOLS)
        started = time.perf_counter()
        result = self.executor.run_now(
            tool, envelope.arguments, run_id=envelope.run_id, call_id=envelope.call_id
        )
        self.metrics.observe(tool.name, time.perf_counter() - started)
        reply = orjson.dumps(ok_reply(tool.name, envelope.run_id, envelope.call_id, result))
        headers = [("message-id", message_id.encode()), ("content-type", CONTENT_TYPE)]
        return envelope.run_id.encode(), reply, headers


def run_librdkafka(bootstrap: str, calls: str, replies: str, group: str) -> None:
    from confluent_kafka import Consumer, Producer

    from stream_adapter_dev.bench.librdkafka_loop import config, take

    work = Work()
    consumer_config, producer_config = config(bootstrap, group)
    consumer_config["isolation.level"] = "read_committed"  # as the worker reads
    producer_config["partitioner"] = "murmur2_random"  # Java's, as replies must be keyed
    producer_config["enable.idempotence"] = True  # as the worker's producer
    consumer, producer = Consumer(consumer_config), Producer(producer_config)
    consumer.subscribe([calls])
    while True:
        records = take(consumer)
        if not records:
            continue
        for r in records:
            if r.error() is not None:
                continue
            out = work.call(r.topic(), r.partition(), r.offset(), r.value())
            if out is None:
                continue
            key, value, headers = out
            while True:
                try:
                    producer.produce(replies, value, key=key, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.01)
        work.metrics.replied("echo", "ok", len(records))
        producer.flush()
        consumer.commit(asynchronous=False)


async def run_aiokafka(bootstrap: str, calls: str, replies: str, group: str) -> None:
    from stream_adapter.kafka import clients as kafka_clients
    from stream_adapter.kafka.partitions import partition_for
    from stream_adapter.stream.engine.patches import install_fast_lz4

    install_fast_lz4()
    work = Work()
    settings = Settings().with_changes(broker=bootstrap)
    consumer = kafka_clients.consumer(
        settings,
        calls,
        group_id=group,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 << 20,
        isolation_level="read_committed",
    )
    producer = kafka_clients.producer(
        settings, linger_ms=2, max_batch_size=256 << 10, enable_idempotence=True
    )
    await consumer.start()
    await producer.start()
    partitions = len(await producer.partitions_for(replies))
    while True:
        fetched = await consumer.getmany(timeout_ms=500, max_records=BATCH)
        if not fetched:
            continue
        batches: dict[int, Any] = {}
        sends = []
        count = 0
        for records in fetched.values():
            for r in records:
                out = work.call(r.topic, r.partition, r.offset, r.value)
                if out is None:
                    continue
                key, value, headers = out
                p = partition_for(key, partitions)
                batch = batches.get(p)
                if batch is None:
                    batch = batches[p] = producer.create_batch()
                if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                    sends.append(await producer.send_batch(batch, replies, partition=p))
                    batch = batches[p] = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=None, headers=headers)
                count += 1
        for p, batch in batches.items():
            sends.append(await producer.send_batch(batch, replies, partition=p))
        await asyncio.gather(*sends)
        work.metrics.replied("echo", "ok", count)
        await consumer.commit()


def main() -> None:
    args = [
        os.environ[n] for n in ("BENCH_BOOTSTRAP", "BENCH_CALLS", "BENCH_REPLIES", "BENCH_GROUP")
    ]
    if os.environ.get("BENCH_CLIENT", "librdkafka") == "librdkafka":
        run_librdkafka(*args)
    else:
        asyncio.run(run_aiokafka(*args))


if __name__ == "__main__":
    main()
