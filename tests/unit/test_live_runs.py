"""A worker's own live run of an approved call is never mistaken for a dead one, and a
decision read before its call's park request waits for it.

Resumes and decisions for one approval come on two topics, so their jobs can run at once; each
waits while the worker runs the call. When a run ends with no outcome stored (its table write
failed), the first waiter may start the next run of an idempotent tool before another waiter
looks: that one must wait for the new run too, not take it for a dead run and give the call up
as `unknown`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from stream_adapter import Executor, ToolRegistry
from stream_adapter.core.approvals import (
    ApprovalRecord,
    ApprovalState,
    Decision,
    apply_decision,
    new_record,
)
from stream_adapter.core.envelope import Envelope
from stream_adapter.core.retries import RetryPolicy
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.review.decide import decision_message
from stream_adapter.settings import Settings
from stream_adapter.stream.approvals import ApprovalFlow
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.engine import Delivery

DEADLINE_S = 5.0


class _Table:
    """The approvals table's get and put over a dict; the first `done` write fails, as a
    send into an aborted transaction does."""

    def __init__(self) -> None:
        self.records: dict[str, ApprovalRecord] = {}
        self.states: list[ApprovalState] = []
        self.fail_done = 1

    def get(self, approval_id: str) -> ApprovalRecord | None:
        return self.records.get(approval_id)

    async def claim(self, partition: int) -> None:
        return None

    async def put(
        self,
        record: ApprovalRecord,
        partition: int,
        *,
        now: bool = False,
        claim: Any = None,
        finishing: bool = False,
    ) -> None:
        await asyncio.sleep(0)
        if record.state is ApprovalState.DONE and self.fail_done:
            self.fail_done -= 1
            raise RuntimeError("transaction aborted")
        self.records[record.approval_id] = record
        self.states.append(record.state)


class _Outputs:
    exactly_once = True

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.dead_letters: list[str] = []

    async def reply(self, reply: dict[str, Any], **_: Any) -> None:
        self.replies.append(reply)

    async def dead_letter(self, delivery: Delivery, exc: Exception, **_: Any) -> None:
        self.dead_letters.append(type(exc).__name__)


def _flow(
    started: asyncio.Event,
    release: asyncio.Event,
    runs: list[int],
    requests_pending: Any = None,
) -> tuple[ApprovalFlow, _Table, _Outputs]:
    reg = ToolRegistry()

    @reg.tool(confirm=True, idempotent=True)
    async def pay(n: int) -> dict[str, Any]:
        runs.append(n)
        if len(runs) == 1:
            started.set()
            await release.wait()
        return {"paid": n}

    outputs = _Outputs()
    ctx = FlowContext(
        settings=Settings(),
        executor=Executor(reg),
        tools=None,
        outputs=outputs,  # type: ignore[arg-type]
        policy=RetryPolicy(attempts=1),
        keys=DecisionKeys({}, allow_unsigned=True),
    )
    table = _Table()
    flow = ApprovalFlow(ctx, table, origin="kafka:test", requests_pending=requests_pending)  # type: ignore[arg-type]
    return flow, table, outputs


def _parked() -> ApprovalRecord:
    envelope = Envelope("pay", {"n": 3}, "run-1", "call-1", None, "calls:0:7", "kafka")
    return new_record(envelope, "pay", origin="kafka:test")


def _approved() -> ApprovalRecord:
    record = _parked()
    decision = Decision(approval_id=record.approval_id, approved=True, reviewer="ann")
    return apply_decision(record, decision)[0]


def _decision(record: ApprovalRecord) -> Delivery:
    decision = Decision(approval_id=record.approval_id, approved=True, reviewer="ann")
    value, headers = decision_message(decision, DecisionKeys({}, allow_unsigned=True), record)
    topic = Settings().decisions_topic
    return Delivery(topic, 0, 3, record.approval_id.encode(), value, dict(headers))


async def test_a_waiter_waits_for_the_run_another_waiter_started() -> None:
    started, release, runs = asyncio.Event(), asyncio.Event(), []
    flow, table, outputs = _flow(started, release, runs)
    record = table.records.setdefault(_approved().approval_id, _approved())
    original = Delivery("calls", 0, 7, b"k", b"{}")

    first = asyncio.create_task(flow._answer(record, original, 0, None))
    await asyncio.wait_for(started.wait(), DEADLINE_S)
    running = table.get(record.approval_id)
    assert running is not None and running.state is ApprovalState.RUNNING
    waiters = [asyncio.create_task(flow._answer(running, original, 0, None)) for _ in range(2)]
    for _ in range(3):  # each waiter's first step reaches the live run's event
        await asyncio.sleep(0)
    assert outputs.replies == []
    release.set()
    done = await asyncio.wait_for(
        asyncio.gather(first, *waiters, return_exceptions=True), DEADLINE_S
    )

    assert isinstance(done[0], RuntimeError)  # the first run's outcome was not stored
    assert runs == [3, 3]  # run again once, by one waiter
    assert ApprovalState.UNKNOWN not in table.states
    final = table.get(record.approval_id)
    assert final is not None and final.state is ApprovalState.DONE
    statuses = [(r["status"], r.get("outcome", {}).get("status")) for r in outputs.replies]
    assert statuses == [("ok", None), ("already_done", "ok")], outputs.replies


async def test_a_decision_read_before_its_park_waits_for_it() -> None:
    started, release, runs = asyncio.Event(), asyncio.Event(), []
    release.set()
    parked = _parked()
    asked: list[int] = []

    def requests_pending(partition: int) -> bool:
        asked.append(partition)
        return parked.approval_id not in table.records

    flow, table, outputs = _flow(started, release, runs, requests_pending)
    table.fail_done = 0
    decided = asyncio.create_task(flow.process(_decision(parked)))
    for _ in range(3):  # the decision job looks, finds no record, and waits
        await asyncio.sleep(0)
    assert not decided.done() and asked == [0]
    table.records[parked.approval_id] = parked  # the park request's job runs now
    await asyncio.wait_for(decided, DEADLINE_S)
    assert outputs.dead_letters == [] and runs == [3]
    assert [r["status"] for r in outputs.replies] == ["ok"]


async def test_a_decision_for_no_approval_is_refused_once_the_requests_are_handled() -> None:
    started, release, runs = asyncio.Event(), asyncio.Event(), []
    flow, _, outputs = _flow(started, release, runs, lambda partition: False)
    await asyncio.wait_for(flow.process(_decision(_parked())), DEADLINE_S)
    assert outputs.dead_letters == ["ApprovalNotFound"] and runs == []
