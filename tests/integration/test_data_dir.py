"""A data folder shared with another app, another approvals topic, or an older copy of the
approvals topic: the worker starts, keeps its own store, and serves none of the other's records
(it used to stop with Faust's ConsistencyError, on every start)."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from tests.harness import Client, WorkerProcess, make_settings, unique, wait_for


async def park(settings: Settings) -> str:
    """Park a confirm call; its approval id."""
    async with Client(settings) as client:
        run_id = unique("run")
        await client.call(
            "send_invoice", {"customer": "acme", "amount_cents": 1}, run_id=run_id, call_id="c"
        )
        reply = await client.reply_for(status="pending_approval", run_id=run_id, timeout_s=60)
    return str(reply["approval_id"])


async def resume_is_unknown(settings: Settings, approval_id: str) -> None:
    """A resume for approval_id is answered ApprovalNotFound: the record is not served."""
    async with Client(settings) as client:
        await client.send({"approval_id": approval_id})
        # The replies topic may hold the park's pending_approval too: wait for the error.
        reply = await client.reply_for(status="error", approval_id=approval_id, timeout_s=60)
    assert reply["error"]["kind"] == "ApprovalNotFound", reply


def worker(settings: Settings, workdir: Path, data: Path, name: str) -> WorkerProcess:
    return WorkerProcess(settings, workdir, {"STREAM_ADAPTER_DATA_DIR": str(data)}, name=name)


@pytest.mark.parametrize("change", ["app_id", "approvals_topic"])
async def test_another_apps_store_in_the_same_folder(
    settings: Settings, kafka_bootstrap: str, tmp_path: Path, change: str
) -> None:
    data = tmp_path / "shared-data"
    first = worker(settings, tmp_path / "work", data, "first").start()
    try:
        await first.ready()
        approval_id = await park(settings)
        assert first.terminate() == 0
    finally:
        first.kill()
    if change == "app_id":
        other = make_settings(kafka_bootstrap, tmp_path)
    else:
        other = settings.with_changes(approvals_topic=unique(f"{settings.app_id}-approvals"))
    await create_topics(other)
    second = worker(other, tmp_path / "work", data, "second").start()
    try:
        await second.ready()
        await resume_is_unknown(other, approval_id)
        assert "ConsistencyError" not in second.log_text()
    finally:
        second.kill()
    mine, theirs = (s.with_changes(data_dir=data).tables_dir for s in (settings, other))
    assert mine != theirs and mine.is_dir() and theirs.is_dir()


async def test_a_store_of_an_older_copy_of_the_topic_is_set_aside(
    settings: Settings, tmp_path: Path
) -> None:
    data = tmp_path / "data-kept"
    first = worker(settings, tmp_path / "work", data, "first").start()
    try:
        await first.ready()
        approval_id = await park(settings)
        assert first.terminate() == 0
    finally:
        first.kill()
    await recreate(settings, settings.approvals_topic)
    again = worker(settings, tmp_path / "work", data, "again").start()
    try:
        await again.ready()
        await resume_is_unknown(settings, approval_id)
        log = again.log_text()
        assert "ConsistencyError" not in log
        assert log.count("set aside; rebuilding it") >= 1, log[-4000:]
    finally:
        again.kill()
    tables = settings.with_changes(data_dir=data).tables_dir
    assert list(tables.rglob("*.stale-*")), "the old store is kept, renamed"


async def recreate(settings: Settings, topic: str) -> None:
    """Delete topic, wait until the broker has forgotten it, and create the topology's topics."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_topics([topic])

        async def gone() -> bool:
            return topic not in await admin.list_topics()

        await wait_for(gone, timeout_s=60, what=f"{topic} to be deleted")
    finally:
        await admin.close()

    async def created() -> bool:
        try:
            await create_topics(settings)
        except Exception:  # the broker may refuse the name for a moment after deleting it
            return False
        return True

    await wait_for(created, timeout_s=60, what=f"{topic} to be created again", interval_s=1)
