"""Contender 1: a hand-written aiokafka loop, the aiokafka ceiling for envelope -> reply work
(the same loop on librdkafka, `librdkafka_loop.py`, is the client ceiling).

Consume a batch, parse each envelope, produce its reply, flush, then commit: the same
at-least-once guarantee as the worker, with none of its features.
"""

from __future__ import annotations

import asyncio
import os

import orjson

from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.settings import Settings
from stream_adapter.stream.engine.patches import install_fast_lz4


async def run(bootstrap: str, calls: str, replies: str, group: str) -> None:
    # The environment's settings (COMPRESSION too), like the worker it is measured beside,
    # and lz4 written at the worker's level.
    install_fast_lz4()
    settings = Settings().with_changes(broker=bootstrap)
    consumer = kafka_clients.consumer(
        settings,
        calls,
        group_id=group,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 << 20,
    )
    producer = kafka_clients.producer(settings, linger_ms=2, max_batch_size=256 << 10)
    await consumer.start()
    await producer.start()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            if not batches:
                continue
            for records in batches.values():
                for record in records:
                    envelope = orjson.loads(record.value)
                    reply = {
                        "status": "ok",
                        "tool": envelope["tool"],
                        "result": envelope["arguments"],
                    }
                    await producer.send(replies, orjson.dumps(reply), key=record.key)
            await producer.flush()
            await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()


if __name__ == "__main__":
    asyncio.run(
        run(
            os.environ["BENCH_BOOTSTRAP"],
            os.environ["BENCH_CALLS"],
            os.environ["BENCH_REPLIES"],
            os.environ["BENCH_GROUP"],
        )
    )
