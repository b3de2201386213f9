"""Ids derived from a Kafka delivery do not repeat when the calls topic is deleted and created
again (or served by another app), a call parked before approval ids named their source still
answers from its record, and the same ids with another call are refused (contract §3, §7)."""

from __future__ import annotations

import asyncio
import base64
import time
from hashlib import blake2b
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka.admin import AdminClient, NewTopic

from stream_adapter.core.approvals import ApprovalRecord, utc_now
from stream_adapter.core.envelope import TOPIC_MAX_MESSAGE_BYTES
from stream_adapter.core.ids import derive_ids
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import approval_requests_topic, create_topics, describe_topics
from tests.harness import Client, WorkerProcess, make_settings, read_all, unique

INVOICE = "send_invoice"


def _one_partition(bootstrap: str, tmp_path: Path, **changes: Any) -> Settings:
    settings = make_settings(bootstrap, tmp_path, partitions=1, **changes)
    asyncio.run(create_topics(settings))
    return settings


async def _recreate(settings: Settings, topic: str) -> None:
    """Delete topic and create it again, empty, under the same name."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 60
    while True:
        # As `topics create` makes it: the record size is part of a topic's expected config.
        size = {"max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES)}
        new = NewTopic(topic, settings.partitions, 1, config=size)
        created = admin.create_topics([new])[topic]
        try:
            created.result(timeout=30)
            break
        except Exception:  # still being deleted
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    while not admin.list_topics(topic, timeout=10).topics[topic].partitions:  # metadata caught up
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} created but not yet in the metadata")
        await asyncio.sleep(0.2)


async def _records(settings: Settings) -> list[ApprovalRecord]:
    messages = await read_all(settings.bootstrap_servers, settings.approvals_topic)
    return [ApprovalRecord.from_bytes(m.value) for m in messages if m.value is not None]


def _pending(client: Client) -> list[dict[str, Any]]:
    return [r for r in client.replies if r.get("status") == "pending_approval"]


async def _worker(settings: Settings, tmp_path: Path, name: str) -> WorkerProcess:
    worker = WorkerProcess(settings, tmp_path / "work", name=name).start()
    await worker.ready()
    return worker


async def test_a_recreated_calls_topic_gives_a_new_call_its_own_approval(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = await asyncio.to_thread(_one_partition, kafka_bootstrap, tmp_path)
    worker = await _worker(settings, tmp_path, "before")
    try:
        async with Client(settings) as client:
            _, old_offset = await client.send(
                {"tool": INVOICE, "arguments": {"customer": "old-co", "amount_cents": 100}}
            )
            [old] = await client.wait_replies(lambda rs: len(_pending(client)) == 1)
        worker.terminate()
        await _recreate(settings, settings.calls_topic)
        worker = await _worker(settings, tmp_path, "after")
        async with Client(settings) as client:
            _, new_offset = await client.send(
                {"tool": INVOICE, "arguments": {"customer": "new-co", "amount_cents": 200}}
            )
            assert new_offset == old_offset  # the same delivery id, calls:0:0
            await client.wait_replies(lambda rs: len(_pending(client)) == 2)
            new = _pending(client)[1]
    finally:
        worker.kill()
    assert (new["run_id"], new["call_id"]) != (old["run_id"], old["call_id"])
    assert new["approval_id"] != old["approval_id"]
    records = {r.approval_id: r for r in await _records(settings)}
    assert records[new["approval_id"]].arguments["customer"] == "new-co"
    assert records[old["approval_id"]].arguments["customer"] == "old-co"


async def test_topics_describe_warns_of_records_from_an_earlier_incarnation(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = await asyncio.to_thread(_one_partition, kafka_bootstrap, tmp_path)
    worker = await _worker(settings, tmp_path, "before")
    try:
        async with Client(settings) as client:
            for n in range(3):  # a record of the old topic at offset 2, past the new one's end
                await client.send(
                    {"tool": INVOICE, "arguments": {"customer": f"c{n}", "amount_cents": 1}}
                )
            await client.wait_replies(lambda rs: len(_pending(client)) == 3)
    finally:
        worker.kill()
    [calls] = [s for s in await describe_topics(settings) if s.spec.name == settings.calls_topic]
    assert calls.warnings == ()
    await _recreate(settings, settings.calls_topic)
    [calls] = [s for s in await describe_topics(settings) if s.spec.name == settings.calls_topic]
    assert len(calls.warnings) == 1 and calls.warnings[0].startswith("3 approval record(s)")
    assert calls.problems == []  # a warning, not drift


async def test_two_apps_on_two_incarnations_of_a_topic_derive_other_ids(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    first = await asyncio.to_thread(_one_partition, kafka_bootstrap, tmp_path)
    second_id = unique("t")
    second = first.with_changes(
        app_id=second_id,
        approvals_topic=f"{second_id}-approvals",
        decisions_topic=f"{second_id}-decisions",
    )
    replies: list[dict[str, Any]] = []
    for settings, name in ((first, "one"), (second, "two")):
        if settings is second:
            await _recreate(first, first.calls_topic)
            await asyncio.to_thread(asyncio.run, create_topics(second))
        worker = await _worker(settings, tmp_path, name)
        try:
            async with Client(settings) as client:
                _, offset = await client.send({"tool": "echo", "arguments": {"n": name}})
                assert offset == 0
                want = len(replies) + 1
                await client.wait_replies(lambda rs, want=want: len(rs) == want)
                replies = list(client.replies)
        finally:
            worker.kill()
    one, two = replies
    assert (one["run_id"], one["call_id"]) != (two["run_id"], two["call_id"])


def _old_approval_id(run_id: str, call_id: str) -> str:
    """The approval id a worker derived before approval ids named their source."""

    def encoded(part: str) -> bytes:
        data = part.encode()
        return b"%d:%s" % (len(data), data)

    h = blake2b(digest_size=16, person=b"stream-adapter")
    h.update(encoded("approval") + encoded(run_id) + encoded(call_id))
    return "appr_" + h.hexdigest()


async def test_a_call_parked_before_the_upgrade_answers_from_its_record(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = await asyncio.to_thread(_one_partition, kafka_bootstrap, tmp_path)
    arguments = {"customer": "acme", "amount_cents": 1200}
    async with Client(settings) as client:
        # The call, parked by a worker of the old derivation that stopped before committing
        # its offset: the message is delivered again to the upgraded worker.
        _, offset = await client.send({"tool": INVOICE, "arguments": arguments})
        message_id = f"{settings.calls_topic}:0:{offset}"
        run_id, call_id = derive_ids(message_id, settings.source)  # the old derivation
        approval_id = _old_approval_id(run_id, call_id)
        record = ApprovalRecord(
            approval_id=approval_id,
            tool=INVOICE,
            arguments=arguments,
            run_id=run_id,
            call_id=call_id,
            source=settings.source,
            message_id=message_id,
            origin=f"kafka:{settings.app_id}",
            requested_at=utc_now(),
        )
        await client.send(
            record.to_bytes(), key=approval_id.encode(), topic=settings.approvals_topic
        )
        worker = await _worker(settings, tmp_path, "upgraded")
        try:
            pending = await client.reply_for(status="pending_approval", run_id=run_id)
            assert (pending["call_id"], pending["approval_id"]) == (call_id, approval_id)
            await client.decide(approval_id, True)
            ok = await client.reply_for(status="ok", run_id=run_id)
            assert ok["result"] == {"invoiced": "acme", "amount_cents": 1200}
        finally:
            worker.kill()
    assert len(_pending(client)) == 1
    assert {r.approval_id for r in await _records(settings)} == {approval_id}  # no second park
    # A record that keeps no topic id, of a message the topic still has: not an older one.
    [calls] = [s for s in await describe_topics(settings) if s.spec.name == settings.calls_topic]
    assert calls.warnings == ()


async def test_the_same_ids_with_other_arguments_are_refused(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = await asyncio.to_thread(_one_partition, kafka_bootstrap, tmp_path)
    ids = {"run_id": unique("run"), "call_id": unique("call")}
    worker = await _worker(settings, tmp_path, "worker")
    try:
        async with Client(settings) as client:
            await client.send(
                {"tool": INVOICE, "arguments": {"customer": "a", "amount_cents": 1}, **ids}
            )
            first = await client.reply_for(status="pending_approval", **ids)
            await client.send(
                {"tool": INVOICE, "arguments": {"customer": "b", "amount_cents": 9}, **ids}
            )
            await client.wait_replies(lambda rs: len(rs) == 2)
            second = client.replies[1]
    finally:
        worker.kill()
    assert second["status"] == "error", second
    assert second["error"]["kind"] == "ToolUsageError"
    assert second.get("approval_id") != first["approval_id"]
    records = await _records(settings)
    assert {r.arguments["customer"] for r in records} == {"a"}


async def test_a_park_request_an_earlier_worker_sent_parks_under_its_legacy_id(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = await asyncio.to_thread(_one_partition, kafka_bootstrap, tmp_path)
    arguments = {"customer": "acme", "amount_cents": 5}
    call = {"tool": INVOICE, "arguments": arguments}
    async with Client(settings) as client:
        _, offset = await client.send(call)
        message_id = f"{settings.calls_topic}:0:{offset}"
        run_id, call_id = derive_ids(message_id, settings.source)  # the old derivation
        approval_id = _old_approval_id(run_id, call_id)
        request = {  # as a worker before scopes sent it, keyed by the old approval id
            "kind": "park",
            "tool": INVOICE,
            "arguments": arguments,
            "run_id": run_id,
            "call_id": call_id,
            "message_id": message_id,
            "source": settings.source,
            "delivery": {
                "topic": settings.calls_topic,
                "partition": 0,
                "offset": offset,
                "key": None,
                "value": base64.b64encode(orjson.dumps(call)).decode(),
            },
            "traceparent": None,
        }
        await client.send(
            request, key=approval_id.encode(), topic=approval_requests_topic(settings)
        )
        worker = await _worker(settings, tmp_path, "upgraded")
        try:
            await client.wait_replies(lambda rs: len(_pending(client)) >= 1)
            assert {r["approval_id"] for r in _pending(client)} == {approval_id}
        finally:
            worker.kill()
    assert {r.approval_id for r in await _records(settings)} == {approval_id}
