"""A decision whose Kafka key is not its approval_id is refused: read on another partition than
its record's, it could split one record's history across changelog partitions (contract §7)."""

from __future__ import annotations

from pathlib import Path

import orjson

from stream_adapter.core.approvals import ApprovalRecord
from stream_adapter.stream.topics import create_topics
from tests.harness import (
    Client,
    WorkerProcess,
    bound_signature,
    dead_letters,
    make_settings,
    read_all,
    unique,
)


async def test_a_rekeyed_decision_is_dead_lettered_and_changes_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # One partition: the re-keyed decision reaches the record's own partition, so only the
    # key check stops it.
    settings = make_settings(kafka_bootstrap, tmp_path, partitions=1)
    await create_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "work").start()
    ids = {"run_id": unique("run"), "call_id": unique("call")}
    try:
        await worker.ready()
        async with Client(settings) as client:
            await client.send(
                {"tool": "send_invoice", "arguments": {"customer": "a", "amount_cents": 1}, **ids}
            )
            pending = await client.reply_for(status="pending_approval", **ids)
            approval_id = pending["approval_id"]
            body = {"approval_id": approval_id, "approved": True, "reviewer": "ann"}
            value = orjson.dumps(body)
            headers = await bound_signature(settings, approval_id, value)
            await client.send(
                value, key=b"another-key", topic=settings.decisions_topic, headers=headers
            )
            [letter] = await dead_letters(settings)
            kinds = dict(letter.headers)
            assert kinds["error-kind"] == b"ToolUsageError"
            assert kinds["source-topic"] == settings.decisions_topic.encode()
            messages = await read_all(settings, settings.approvals_topic)
            states = [ApprovalRecord.from_bytes(m.value).state for m in messages]
            assert states == ["pending"]
            await client.decide(approval_id, True)  # the same decision, keyed right
            ok = await client.reply_for(status="ok", **ids)
            assert ok["approval_id"] == approval_id
    finally:
        worker.kill()
    assert not [r for r in client.replies if r["status"] == "error"]
