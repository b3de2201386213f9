"""A worker paused during an approved run, past the session timeout, wakes up as a zombie:
whatever its run does then, it cannot change the approval's record or answer the agent.

Two workers; the one running an approved `wire_funds` is SIGSTOPped before the tool's effect,
for longer than the session timeout, and SIGCONTed once the other worker owns the approval
and has answered the agent `unknown`. The zombie's run then has its effect (a ledger line),
but its `done` never reaches the approvals changelog (read committed, by librdkafka): the
call stays `unknown` and listed for a person, the owner's table says so too, and no `ok`
reply is published. At either guarantee.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from stream_adapter.core.approvals import ApprovalRecord, Resolution
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.review.decide import decision_message
from stream_adapter.settings import Settings
from stream_adapter_dev.chaos.running import TOPOLOGY
from tests.harness import Client, WorkerProcess, dead_letters, latest_record, unique, wait_for
from tests.integration.review_support import cli

pytestmark = pytest.mark.integration

LATENCY_S = 6.0
"""wire_funds's external API: its effect comes half of it after the run starts."""
SESSION_TIMEOUT_S = 6.0


def _changelog(settings: Settings, approval_id: str) -> list[ApprovalRecord]:
    """approval_id's records on the approvals changelog, read_committed, in order."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": unique("changelog-reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        topic = settings.approvals_topic
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}  # fmt: skip
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[ApprovalRecord] = []
        left = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 30
        while left and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            ours = message is not None and message.error() is None
            if ours and message.key() == approval_id.encode() and message.value() is not None:
                records.append(ApprovalRecord.from_bytes(message.value()))
            # A read_committed position passes an open transaction only once it ends.
            for tp in consumer.position([TopicPartition(topic, p) for p in left]):
                if tp.offset >= ends[tp.partition]:
                    left.discard(tp.partition)
        assert not left, f"changelog partitions {left} not read to their end"
        return records
    finally:
        consumer.close()


def _journal(path: Path, call_id: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [line for line in lines if line["call_id"] == call_id]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_paused_worker_cannot_settle_an_approval_it_no_longer_owns(
    worker_factory: Callable[..., WorkerProcess],
    settings: Settings,
    tmp_path: Path,
    guarantee: str,
) -> None:
    journal = tmp_path / "runs.jsonl"
    env = {
        "STREAM_ADAPTER_PROCESSING_GUARANTEE": guarantee,
        "STREAM_ADAPTER_SESSION_TIMEOUT_S": str(SESSION_TIMEOUT_S),
        "STREAM_ADAPTER_TOPOLOGY": TOPOLOGY,
        "STREAM_ADAPTER_DEMO_TOOL_LATENCY_S": str(LATENCY_S),
        "STREAM_ADAPTER_DEMO_RUNS": str(journal),
    }
    workers = [worker_factory(name=n, **env) for n in ("one", "two")]
    for worker in workers:
        await worker.ready()
    async with Client(settings, read_committed=guarantee == "exactly_once") as client:
        run_id, call_id = unique("run"), unique("call")
        await client.call(
            "wire_funds",
            {"account": "acme", "amount_cents": 9},
            run_id=run_id,
            call_id=call_id,
            key=run_id.encode(),
        )
        pending = await client.reply_for(status="pending_approval", run_id=run_id, timeout_s=60)
        approval_id = pending["approval_id"]
        await client.decide(approval_id, True)

        await wait_for(
            lambda: bool(_journal(journal, call_id)), timeout_s=60, what="the run to start"
        )
        pid = _journal(journal, call_id)[0]["pid"]
        [zombie] = [w for w in workers if w.proc is not None and w.proc.pid == pid]
        [owner] = [w for w in workers if w is not zombie]
        os.kill(pid, signal.SIGSTOP)
        try:
            # The other worker takes the partition, finds the run dead and answers unknown.
            unknown = await client.reply_for(status="already_done", run_id=run_id, timeout_s=90)
            assert unknown["outcome"] == "unknown", unknown
            # "It did not run" is refused while the zombie's run may still act.
            value, headers = decision_message(
                Resolution(approval_id=approval_id, resolution="not_run", reviewer="bob"),
                DecisionKeys.from_settings(settings),
                await latest_record(settings, approval_id),
            )
            await client.send(
                value,
                key=approval_id.encode(),
                topic=settings.decisions_topic,
                headers=headers,
            )
            [refused] = await dead_letters(settings, at_least=1)
            assert dict(refused.headers)["error-kind"] == b"ApprovalConflict", refused
        finally:
            os.kill(pid, signal.SIGCONT)

        def zombie_run_over() -> bool:
            return any(e["event"] == "end" for e in _journal(journal, call_id))

        await wait_for(zombie_run_over, timeout_s=60, what="the zombie's run to end")

        def zombie_finished() -> bool:
            # Its outcome written (the fault) or discarded (the fix): either is logged.
            log = zombie.log_text()
            return "outcome discarded" in log or any(
                r.state == "done" for r in _changelog(settings, approval_id)
            )

        await wait_for(zombie_finished, timeout_s=60, what="the zombie's run to settle")

        records = _changelog(settings, approval_id)
        assert [r.state for r in records if r.state == "done"] == [], records
        last = records[-1]
        assert last.state == "unknown", records
        # When and where the last run started, and when it is surely over, are kept.
        assert (last.started_by or "").endswith(f":{pid}") and last.run_deadline, last

        listed = cli(settings, "approvals", "list", "--state", "unknown", "--json")
        assert listed.returncode == 0, listed.stderr
        ids = {json.loads(line)["approval_id"] for line in listed.stdout.splitlines()}
        assert approval_id in ids
        shown = cli(settings, "approvals", "show", approval_id)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["run_deadline"] == last.run_deadline

        # The owner's table agrees with its changelog: a resume answers from it, unknown.
        before = len(client.replies_for(run_id=run_id, status="already_done"))
        await client.send({"approval_id": approval_id}, key=run_id.encode())

        await client.wait_replies(
            lambda _: len(client.replies_for(run_id=run_id, status="already_done")) > before,
            timeout_s=60,
            what="the owner's answer to a resume",
        )
        again = client.replies_for(run_id=run_id, status="already_done")[before:]
        assert {r["outcome"] for r in again} == {"unknown"}, (
            again,
            owner.log_text()[-3000:],
        )
        # Neither the zombie nor the owner answered ok: the call waits for a person.
        assert client.replies_for(run_id=run_id, status="ok") == []


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_worker_stopping_during_an_approved_run_still_settles_it(
    worker_factory: Callable[..., WorkerProcess],
    settings: Settings,
    tmp_path: Path,
    guarantee: str,
) -> None:
    """SIGTERM is no pause: the worker finishes its run, writes `done` and answers before it
    lets its partitions (and their claims) go."""
    journal = tmp_path / "runs.jsonl"
    worker = worker_factory(
        STREAM_ADAPTER_PROCESSING_GUARANTEE=guarantee,
        STREAM_ADAPTER_TOPOLOGY=TOPOLOGY,
        STREAM_ADAPTER_DEMO_TOOL_LATENCY_S="2",
        STREAM_ADAPTER_DEMO_RUNS=str(journal),
    )
    await worker.ready()
    async with Client(settings, read_committed=guarantee == "exactly_once") as client:
        run_id, call_id = unique("run"), unique("call")
        await client.call(
            "wire_funds", {"account": "a", "amount_cents": 1}, run_id=run_id, call_id=call_id
        )
        pending = await client.reply_for(status="pending_approval", run_id=run_id, timeout_s=60)
        await client.decide(pending["approval_id"], True)
        await wait_for(
            lambda: bool(_journal(journal, call_id)), timeout_s=60, what="the run to start"
        )
        assert worker.terminate() == 0
        ok = await client.reply_for(status="ok", run_id=run_id, timeout_s=30)
        assert ok["result"] == {"wired": "a", "amount_cents": 1}
        states = [r.state for r in _changelog(settings, pending["approval_id"])]
        assert states[-1] == "done", (states, worker.log_text()[-3000:])
