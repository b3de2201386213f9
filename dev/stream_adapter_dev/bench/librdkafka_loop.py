"""The aiokafka loop's work on confluent-kafka (librdkafka): the client ceiling.

Consume a batch, parse each envelope, produce its reply (compressed as COMPRESSION says, lz4
by default, which librdkafka writes in LZ4's fast mode as the worker does), flush, then
commit: at least once, with none of the worker's features. confluent-kafka comes with the
developer tooling (stream-adapter-dev); `--skip librdkafka-loop` leaves this contender out.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from stream_adapter.settings import Settings

BATCH_RECORDS = 5000
"""As many records per consume as the aiokafka loop's `getmany`."""


def config(bootstrap: str, group: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The consumer's and the producer's configuration, matched to the aiokafka loop's:
    no auto commit, 4 MiB per partition fetch; replies acked by all, 2 ms linger, 256 KiB
    batches, the environment's compression."""
    consumer = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.auto.offset.store": True,
        "max.partition.fetch.bytes": 4 << 20,
    }
    producer = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 2,
        "batch.size": 256 << 10,
        "compression.type": Settings().compression,
    }
    return consumer, producer


def take(consumer: Any) -> list[Any]:
    """What has been fetched, up to a batch, waiting up to 0.5 s for the first record only
    (as `getmany` does: librdkafka's `consume` would wait for a whole batch or its timeout)."""
    records: list[Any] = consumer.consume(num_messages=BATCH_RECORDS, timeout=0)
    if records:
        return records
    records = consumer.consume(num_messages=1, timeout=0.5)
    if records:
        records += consumer.consume(num_messages=BATCH_RECORDS - 1, timeout=0)
    return records


def run(bootstrap: str, calls: str, replies: str, group: str) -> None:
    from confluent_kafka import (  # type: ignore[import-untyped]
        Consumer,
        KafkaError,
        KafkaException,
        Producer,
    )

    consumer_config, producer_config = config(bootstrap, group)
    consumer = Consumer(consumer_config)
    producer = Producer(producer_config)
    consumer.subscribe([calls])
    try:
        while True:
            records = take(consumer)
            if not records:
                continue
            for record in records:
                if record.error() is not None:
                    continue  # partition EOF and the like: informational here
                envelope = orjson.loads(record.value())
                reply = {"status": "ok", "tool": envelope["tool"], "result": envelope["arguments"]}
                value = orjson.dumps(reply)
                while True:
                    try:
                        producer.produce(replies, value, key=record.key())
                        break
                    except BufferError:
                        producer.poll(0.01)  # the local queue is full: let it drain
            producer.flush()
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    raise  # nothing new to commit (only errors were consumed) is fine
    finally:
        producer.flush(10)
        consumer.close()


if __name__ == "__main__":
    run(
        os.environ["BENCH_BOOTSTRAP"],
        os.environ["BENCH_CALLS"],
        os.environ["BENCH_REPLIES"],
        os.environ["BENCH_GROUP"],
    )
