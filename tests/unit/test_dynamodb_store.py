"""What is particular to the DynamoDB store, against moto's standalone server (an emulator).

The store contract (park, decide, claim, finish, list, concurrent claims across processes) runs
in test_shared_stores.py with the other shared stores.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from stream_adapter import BrokerError, RecordTooLarge, ToolUsageError
from stream_adapter.core.approvals import ApprovalState, Decision, new_record
from stream_adapter.core.envelope import parse_envelope
from stream_adapter.hosts.stores.dynamodb import STATE_INDEX, DynamoDBApprovalStore

ROOT = Path(__file__).parent.parent.parent


def a_table() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def a_record(arguments: str = '{"n":1}') -> object:
    env = parse_envelope(
        f'{{"tool":"pay","arguments":{arguments}}}'.encode(), message_id=uuid.uuid4().hex
    )
    return new_record(env, "pay", origin="queue")


async def test_the_table_is_created_with_its_state_index(dynamodb_server: str) -> None:
    table = a_table()
    store = DynamoDBApprovalStore(table, region_name="eu-west-1", endpoint_url=dynamodb_server)
    try:
        record = await store.park(a_record())  # type: ignore[arg-type]
        client = await store._client()
        described = (await client.describe_table(TableName=table))["Table"]
        assert [i["IndexName"] for i in described["GlobalSecondaryIndexes"]] == [STATE_INDEX]
        assert [r.approval_id for r in await store.list(ApprovalState.PENDING)] == [
            record.approval_id
        ]
        assert await store.list(ApprovalState.DONE) == []
    finally:
        await store.aclose()


def test_processes_creating_the_table_at_once_all_succeed(dynamodb_server: str) -> None:
    table = a_table()
    code = (
        "import asyncio, sys\n"
        "from stream_adapter.hosts.stores.dynamodb import DynamoDBApprovalStore\n"
        "async def main():\n"
        "    store = DynamoDBApprovalStore(sys.argv[1], region_name='eu-west-1',\n"
        "                                  endpoint_url=sys.argv[2])\n"
        "    print(await store.get('missing'))\n"
        "    await store.aclose()\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code, table, dynamodb_server],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    assert [child.returncode for child in children] == [0] * 4, [err for _, err in outputs]
    assert [out.strip() for out, _ in outputs] == ["None"] * 4


async def test_a_missing_table_is_unavailable_when_creation_is_off(dynamodb_server: str) -> None:
    store = DynamoDBApprovalStore(
        a_table(), region_name="eu-west-1", endpoint_url=dynamodb_server, create_table=False
    )
    try:
        with pytest.raises(BrokerError) as caught:
            await store.get("appr_x")
        assert caught.value.retryable
    finally:
        await store.aclose()


async def test_a_record_over_the_item_limit_is_a_clear_413(dynamodb_server: str) -> None:
    store = DynamoDBApprovalStore(a_table(), region_name="eu-west-1", endpoint_url=dynamodb_server)
    try:
        big = a_record('{"blob":"' + "x" * 500_000 + '"}')
        with pytest.raises(ToolUsageError) as caught:
            await store.park(big)  # type: ignore[arg-type]
        assert caught.value.status == 413 and not caught.value.retryable
        assert "400 KB" in caught.value.detail
        small = await store.park(a_record())  # type: ignore[arg-type]
        await store.decide(
            small.approval_id,
            Decision(approval_id=small.approval_id, approved=True, reviewer="ann"),
        )
        _, won = await store.claim(small.approval_id)
        assert won
        # A reply too big to keep: the tool ran, so its outcome is a small typed error,
        # stored, never an exception that leaves the record running with its outcome lost.
        done = await store.finish(small.approval_id, {"status": "ok", "result": "y" * 500_000})
        assert done.state is ApprovalState.DONE and done.reply is not None
        assert done.reply["status"] == "error"
        assert done.reply["error"]["kind"] == "RecordTooLarge"
        stored = await store.get(small.approval_id)
        assert stored is not None and stored.reply == done.reply
    finally:
        await store.aclose()


async def test_a_call_whose_record_leaves_no_room_is_refused_before_it_can_run(
    dynamodb_server: str,
) -> None:
    store = DynamoDBApprovalStore(a_table(), region_name="eu-west-1", endpoint_url=dynamodb_server)
    try:
        # 300 KB fits an item alone, but not with a decision, a resolution and an outcome.
        tight = a_record('{"blob":"' + "x" * 300_000 + '"}')
        with pytest.raises(RecordTooLarge) as caught:
            await store.park(tight)  # type: ignore[arg-type]
        assert caught.value.status == 413 and "400 KB" in caught.value.detail
        assert await store.get(tight.approval_id) is None  # type: ignore[attr-defined]
    finally:
        await store.aclose()


async def test_clients_are_per_loop_and_closed_by_aclose(dynamodb_server: str) -> None:
    store = DynamoDBApprovalStore(a_table(), region_name="eu-west-1", endpoint_url=dynamodb_server)
    await store.get("x")
    first = await store._client()

    def in_another_loop() -> object:
        async def use() -> object:
            await store.get("x")
            client = await store._client()
            await store.aclose()
            return client

        return asyncio.run(use())

    other = await asyncio.to_thread(in_another_loop)
    assert other is not first
    await store.aclose()
    assert len(store._conns) == 0
