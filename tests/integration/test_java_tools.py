"""Kafka's own Java console consumer (from the broker's jars) reads the worker's replies: the
reply keys and headers as any Kafka client sees them, in the worker's compression."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
import pytest

from stream_adapter_dev.broker import local
from stream_adapter_dev.broker.secure import run_tool
from tests.conftest import JARS_DIR
from tests.harness import Client, WorkerProcess, unique

pytestmark = pytest.mark.integration

SEPARATOR = " | "


@pytest.mark.parametrize("codec", ["lz4", "zstd", "none"])
async def test_the_java_console_consumer_reads_replies_with_keys_and_headers(
    worker_factory: Callable[..., WorkerProcess], client: Client, codec: str
) -> None:
    worker = worker_factory(STREAM_ADAPTER_COMPRESSION=codec)
    await worker.ready()
    settings = client.settings
    sent = [
        await client.call("echo", {"n": n}, run_id=unique("run"), call_id=unique("c"))
        for n in range(3)
    ]
    for call in sent:
        await client.reply_for(call_id=call.call_id)

    # A JVM for up to a minute: off the event loop, so the test's own clients keep going.
    out = await asyncio.to_thread(
        run_tool,
        local.BrokerConfig(jars_dir=JARS_DIR),
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        [
            "--bootstrap-server",
            settings.bootstrap_servers,
            "--topic",
            settings.replies_topic,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--max-messages",
            str(len(sent)),
            "--timeout-ms",
            "60000",
            "--formatter-property",
            "print.key=true",
            "--formatter-property",
            "print.headers=true",
            "--formatter-property",
            f"key.separator={SEPARATOR}",
            "--formatter-property",
            "headers.separator=,",
        ],
    )
    lines = [line for line in out.splitlines() if line.count(SEPARATOR) == 2]
    assert len(lines) == len(sent), out
    seen = {}
    for line in lines:
        headers, key, value = line.split(SEPARATOR)
        reply = orjson.loads(value)
        assert key == reply["run_id"]  # replies are keyed by run_id (SPEC §2)
        pairs = dict(pair.split(":", 1) for pair in headers.split(","))
        assert pairs["content-type"] == "application/json"
        seen[reply["call_id"]] = pairs["message-id"]
    assert seen == {call.call_id: call.message_id for call in sent}
