"""handle_envelope and record_decision over an in-memory store (contract §5, §7)."""

from __future__ import annotations

from typing import Any

import pytest

from stream_adapter import (
    ApprovalDenied,
    ApprovalNotFound,
    Executor,
    MemoryApprovalStore,
    ToolFailed,
    ToolNotFound,
    ToolRegistry,
    ToolUsageError,
    handle_envelope,
    record_decision,
)
from stream_adapter.core.approvals import ApprovalState
from stream_adapter.core.ids import derive_ids

REPLY_KEYS = {"status", "tool", "run_id", "call_id"}


def registry(ledger: list[Any]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int) -> int:
        return a + b

    @reg.tool(confirm=True)
    def pay(customer: str, cents: int) -> dict[str, Any]:
        ledger.append((customer, cents))
        return {"paid": cents}

    @reg.tool(confirm=True)
    def pay_fails(cents: int) -> None:
        raise ConnectionError("down")

    @reg.tool
    def admin() -> None: ...

    return reg


@pytest.fixture
def ledger() -> list[Any]:
    return []


@pytest.fixture
def ex(ledger: list[Any]) -> Executor:
    return Executor(registry(ledger), MemoryApprovalStore())


PAY = b'{"tool":"pay","arguments":{"customer":"acme","cents":100}}'


async def test_a_call_runs(ex: Executor) -> None:
    reply = await handle_envelope(
        ex, b'{"tool":"add","arguments":{"a":1,"b":2}}', message_id="t:0:5", source="kafka"
    )
    run_id, call_id = derive_ids("t:0:5", "kafka")
    assert reply == {
        "status": "ok",
        "tool": "add",
        "run_id": run_id,
        "call_id": call_id,
        "result": 3,
    }


async def test_given_ids_are_kept(ex: Executor) -> None:
    reply = await handle_envelope(
        ex, {"tool": "add", "arguments": {"a": 1, "b": 2}, "run_id": "r", "call_id": "c"}
    )
    assert (reply["run_id"], reply["call_id"]) == ("r", "c")


async def test_allow_list(ex: Executor) -> None:
    with pytest.raises(ToolNotFound):
        await handle_envelope(ex, b'{"tool":"admin","arguments":{}}', tools={"add"})
    with pytest.raises(ToolNotFound):
        await handle_envelope(ex, b'{"tool":"nope","arguments":{}}')


async def test_errors_raise(ex: Executor) -> None:
    with pytest.raises(ToolUsageError):
        await handle_envelope(ex, b"not json")
    with pytest.raises(ToolUsageError) as info:
        await handle_envelope(ex, b'{"tool":"add","arguments":{"a":"1","b":2}}')
    assert info.value.status == 422


async def test_confirm_parks_once_and_redelivery_finds_it(ex: Executor, ledger: list[Any]) -> None:
    first = await handle_envelope(ex, PAY, message_id="m1", source="sqs")
    again = await handle_envelope(ex, PAY, message_id="m1", source="sqs")
    assert first == again and first["status"] == "pending_approval" and first.keys() >= REPLY_KEYS
    assert ex.store is not None and len(await ex.store.list()) == 1
    other = await handle_envelope(ex, PAY, message_id="m2", source="sqs")
    assert other["approval_id"] != first["approval_id"]
    assert ledger == []


async def test_bad_arguments_never_park(ex: Executor) -> None:
    with pytest.raises(ToolUsageError):
        await handle_envelope(ex, b'{"tool":"pay","arguments":{"customer":"a","cents":"1"}}')
    assert ex.store is not None and await ex.store.list() == []


async def test_same_ids_for_a_different_call_are_refused(ex: Executor) -> None:
    await handle_envelope(ex, PAY, message_id="m1")
    with pytest.raises(ToolUsageError):
        await handle_envelope(
            ex, b'{"tool":"pay","arguments":{"customer":"acme","cents":999}}', message_id="m1"
        )


async def test_approve_then_resume_runs_once(ex: Executor, ledger: list[Any]) -> None:
    parked = await handle_envelope(ex, PAY, message_id="m1")
    approval_id = parked["approval_id"]
    assert (await handle_envelope(ex, {"approval_id": approval_id}))["status"] == "pending_approval"
    code, body = await record_decision(ex, approval_id, reviewer="ann", approved=True)
    assert code == 200 and body["state"] == "approved" and body["reviewer"] == "ann"
    ok = await handle_envelope(ex, {"approval_id": approval_id}, message_id="resume-1")
    assert ok["status"] == "ok" and ok["result"] == {"paid": 100}
    assert (ok["run_id"], ok["call_id"], ok["approval_id"]) == (
        parked["run_id"],
        parked["call_id"],
        approval_id,
    )
    done = await handle_envelope(ex, {"approval_id": approval_id})
    assert done["status"] == "already_done" and done["outcome"] == ok
    assert (await handle_envelope(ex, PAY, message_id="m1"))["status"] == "already_done"
    assert ledger == [("acme", 100)]


async def test_denied(ex: Executor, ledger: list[Any]) -> None:
    approval_id = (await handle_envelope(ex, PAY))["approval_id"]
    assert (await record_decision(ex, approval_id, reviewer="r", approved=False, reason="no"))[
        0
    ] == 200
    for _ in range(2):
        with pytest.raises(ApprovalDenied) as info:
            await handle_envelope(ex, {"approval_id": approval_id})
        assert info.value.approval_id == approval_id
    assert ledger == []


async def test_record_decision_codes(ex: Executor) -> None:
    assert (await record_decision(ex, "missing", reviewer="r", approved=True))[0] == 404
    approval_id = (await handle_envelope(ex, PAY))["approval_id"]
    assert (await record_decision(ex, approval_id, reviewer="r", approved=True))[0] == 200
    code, body = await record_decision(ex, approval_id, reviewer="s", approved=False)
    assert code == 409 and body["kind"] == "ApprovalConflict"
    assert (await record_decision(ex, approval_id, reviewer="", approved=False))[0] == 400


async def test_a_failed_approved_call_is_stored_and_never_retried(ex: Executor) -> None:
    approval_id = (await handle_envelope(ex, b'{"tool":"pay_fails","arguments":{"cents":1}}'))[
        "approval_id"
    ]
    await record_decision(ex, approval_id, reviewer="r", approved=True)
    with pytest.raises(ToolFailed) as info:
        await handle_envelope(ex, {"approval_id": approval_id})
    assert info.value.retryable is False
    done = await handle_envelope(ex, {"approval_id": approval_id})
    assert done["status"] == "already_done" and done["outcome"]["status"] == "error"
    assert done["outcome"]["error"]["kind"] == "ToolFailed"


async def test_crash_while_running_reports_unknown(ex: Executor) -> None:
    approval_id = (await handle_envelope(ex, PAY))["approval_id"]
    await record_decision(ex, approval_id, reviewer="r", approved=True)
    assert ex.store is not None
    await ex.store.claim(approval_id)  # a worker claimed it and died
    reply = await handle_envelope(ex, {"approval_id": approval_id})
    assert reply["status"] == "already_done" and reply["outcome"] == "unknown"


async def test_resume_errors(ex: Executor, ledger: list[Any]) -> None:
    with pytest.raises(ApprovalNotFound):
        await handle_envelope(ex, {"approval_id": "missing"})
    approval_id = (await handle_envelope(ex, PAY))["approval_id"]
    await record_decision(ex, approval_id, reviewer="r", approved=True)
    with pytest.raises(ToolNotFound):
        await handle_envelope(ex, {"approval_id": approval_id}, tools={"add"})
    assert ex.store is not None
    record = await ex.store.get(approval_id)
    assert record is not None and record.state is ApprovalState.APPROVED  # not consumed
    assert ledger == []


async def test_records_of_another_origin_are_refused(ledger: list[Any]) -> None:
    store = MemoryApprovalStore()
    http = Executor(registry(ledger), store, origin="http")
    queue = Executor(registry(ledger), store, origin="queue")
    approval_id = (await handle_envelope(http, PAY, message_id="m"))["approval_id"]
    with pytest.raises(ToolUsageError):
        await handle_envelope(queue, {"approval_id": approval_id})
    with pytest.raises(ToolUsageError):
        await handle_envelope(queue, PAY, message_id="m")
    assert (await record_decision(queue, approval_id, reviewer="r", approved=True))[0] == 400


async def test_confirm_without_a_store_is_a_clear_error(ledger: list[Any]) -> None:
    ex = Executor(registry(ledger))
    with pytest.raises(ToolFailed, match="no approval store"):
        await handle_envelope(ex, PAY)
    with pytest.raises(ToolFailed, match="no approval store"):
        await handle_envelope(ex, {"approval_id": "a"})
    assert (await handle_envelope(ex, b'{"tool":"add","arguments":{"a":1,"b":1}}'))["result"] == 2


async def test_two_sources_with_the_same_ids_never_share_a_record(ex: Executor) -> None:
    call = b'{"tool":"pay","arguments":{"customer":"acme","cents":100},"run_id":"r","call_id":"c"}'
    first = await handle_envelope(ex, call, message_id="1", source="sqs")
    second = await handle_envelope(ex, call, message_id="2", source="pubsub")
    assert first["status"] == second["status"] == "pending_approval"
    assert first["approval_id"] != second["approval_id"]


async def test_a_record_parked_under_its_legacy_approval_id_answers_its_call(
    ex: Executor, ledger: list[Any]
) -> None:
    """Parked before approval ids named their source: the call finds that record again."""
    from stream_adapter.core.approvals import new_record
    from stream_adapter.core.envelope import parse_envelope
    from stream_adapter.core.ids import legacy_approval_id

    call = b'{"tool":"pay","arguments":{"customer":"acme","cents":100},"run_id":"r","call_id":"c"}'
    envelope = parse_envelope(call, message_id="m", source="sqs")
    old = new_record(envelope, "pay", origin=ex.origin).model_copy(
        update={"approval_id": legacy_approval_id("r", "c")}
    )
    assert ex.store is not None
    await ex.store.park(old)
    reply = await handle_envelope(ex, call, message_id="m", source="sqs")
    assert reply["approval_id"] == old.approval_id
    assert len(await ex.store.list()) == 1


async def test_arguments_equal_only_in_python_name_another_call() -> None:
    """1 and 1.0 (or true) are one value to Python's ==, not to JSON: the same ids with the
    other one are someone else's call, refused."""
    reg = ToolRegistry()

    @reg.tool(confirm=True)
    def weigh(kg: float) -> float:
        return kg

    ex = Executor(reg, MemoryApprovalStore())
    ids = b'"run_id":"r","call_id":"c"'
    first = await handle_envelope(ex, b'{"tool":"weigh","arguments":{"kg":1},%s}' % ids)
    assert first["status"] == "pending_approval"
    with pytest.raises(ToolUsageError):
        await handle_envelope(ex, b'{"tool":"weigh","arguments":{"kg":1.0},%s}' % ids)
