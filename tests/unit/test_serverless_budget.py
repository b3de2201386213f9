"""An approved call and the invocation's time budget: a run the time left cannot hold is not
started (the message is failed and runs when delivered again); a started run is never cut."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from stream_adapter import (
    Executor,
    MemoryApprovalStore,
    RunSync,
    ToolRegistry,
    ToolTimeout,
    record_decision,
    tool_handler,
)
from stream_adapter.core.approvals import ApprovalState
from tests.unit.aws_events import LambdaContext, eventbridge_event, kafka_event, sqs_event

RUN_S = 1.0
"""How long the confirm tools take."""


class Pay:
    """An executor whose confirm tools count the runs they start and finish."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.store = MemoryApprovalStore()
        registry = ToolRegistry()

        @registry.tool(confirm=True, timeout_s=2 * RUN_S)
        async def pay(cents: int) -> int:
            self.started.append("pay")
            await asyncio.sleep(RUN_S)
            self.finished.append("pay")
            return cents

        @registry.tool(confirm=True)
        async def pay_untimed(cents: int) -> int:
            self.started.append("pay_untimed")
            await asyncio.sleep(RUN_S)
            self.finished.append("pay_untimed")
            return cents

        @registry.tool(confirm=True)
        def pay_sync(cents: int) -> int:
            self.started.append("pay_sync")
            time.sleep(RUN_S)
            self.finished.append("pay_sync")
            return cents

        @registry.tool
        async def ok(n: int) -> int:
            return n

        self.executor = Executor(registry, self.store)

    def approved(self, tool: str) -> str:
        """Park a call of tool through SQS and approve it; its approval id."""
        handler = tool_handler(self.executor)
        assert handler(sqs_event([{"tool": tool, "arguments": {"cents": 5}}])) == {
            "batchItemFailures": []
        }
        (record,) = self.records(ApprovalState.PENDING)
        status, _ = asyncio.run(
            record_decision(self.executor, record.approval_id, reviewer="ann", approved=True)
        )
        assert status == 200
        return record.approval_id

    def records(self, state: ApprovalState | None = None) -> list[Any]:
        return asyncio.run(self.store.list(state))

    def state(self, approval_id: str) -> ApprovalState:
        record = asyncio.run(self.store.get(approval_id))
        assert record is not None
        return record.state


def failed_ids(answer: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in answer["batchItemFailures"]]


@pytest.mark.parametrize("runner", [None, RunSync()], ids=["shared", "fresh"])
def test_a_run_that_cannot_fit_is_left_for_the_redelivery(runner: RunSync | None) -> None:
    pay = Pay()
    approval_id = pay.approved("pay")
    resume = sqs_event([{"approval_id": approval_id}])
    short = tool_handler(pay.executor, timeout=0.3, runner=runner)(resume)
    assert failed_ids(short) == [resume["Records"][0]["messageId"]]
    assert pay.state(approval_id) is ApprovalState.APPROVED  # not claimed: nothing is lost
    assert pay.started == []
    # The queue delivers it again, to an invocation with time enough: it runs, once.
    assert tool_handler(pay.executor, timeout=10, runner=runner)(resume) == {
        "batchItemFailures": []
    }
    assert pay.finished == ["pay"]
    (record,) = pay.records(ApprovalState.DONE)
    assert record.reply["status"] == "ok" and record.reply["result"] == 5


def test_the_hosts_remaining_time_counts_too() -> None:
    pay = Pay()
    approval_id = pay.approved("pay")
    resume = sqs_event([{"approval_id": approval_id}])
    context = LambdaContext(remaining_s=1.0 + RUN_S)  # 1 s margin: less than the 2 s timeout
    answer = tool_handler(pay.executor)(resume, context)
    assert failed_ids(answer) == [resume["Records"][0]["messageId"]]
    assert pay.state(approval_id) is ApprovalState.APPROVED and pay.started == []


@pytest.mark.parametrize("tool", ["pay_untimed", "pay_sync"])
def test_a_started_run_is_not_cut_by_the_budget(tool: str) -> None:
    """A tool without a timeout may run past the budget: cut, its approval would be lost."""
    pay = Pay()
    approval_id = pay.approved(tool)
    resume = sqs_event([{"approval_id": approval_id}, {"tool": "ok", "arguments": {"n": 1}}])
    answer = tool_handler(pay.executor, timeout=0.3)(resume)
    # The approved run finished; the message after it found the budget spent.
    assert failed_ids(answer) == [resume["Records"][1]["messageId"]]
    assert pay.finished == [tool]
    (record,) = pay.records(ApprovalState.DONE)
    assert record.reply["status"] == "ok"
    again = tool_handler(pay.executor, timeout=10)(sqs_event([{"approval_id": approval_id}]))
    assert again == {"batchItemFailures": []}
    assert pay.finished == [tool]  # a redelivery runs nothing


def test_msk_and_eventbridge_raise_and_leave_the_run_for_the_retry() -> None:
    pay = Pay()
    approval_id = pay.approved("pay")
    handler = tool_handler(pay.executor, timeout=0.3)
    with pytest.raises(ToolTimeout):
        handler(kafka_event({0: [{"approval_id": approval_id}]}))
    with pytest.raises(ToolTimeout):
        handler(eventbridge_event({"approval_id": approval_id}))
    assert pay.state(approval_id) is ApprovalState.APPROVED and pay.started == []
    reply = tool_handler(pay.executor, timeout=10)(eventbridge_event({"approval_id": approval_id}))
    assert reply["status"] == "ok" and pay.finished == ["pay"]
