"""Temporal, workflow side: a call whose tool needs approval waits for a signal, then resumes.

Workflow code is replayed, so it never calls the adapter: every call and every resume is the
``run_envelope`` activity (``examples.temporal_activities``), named here by its name only.

1. The workflow runs the call as an activity. ``ok`` (or any other settled reply) is its result.
2. ``pending_approval``: it waits for the ``decided`` signal. The review app records the
   decision in the shared store (``record_decision``), then signals the workflow. The signal
   carries nothing: a message never approves anything; only the stored decision does.
3. On the signal, a resume activity (``{"approval_id"}``) runs the approved call once, or
   fails the workflow with ``ApprovalDenied``. A signal that arrives while the approval is
   still pending just leads to another wait.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

__all__ = ["ACTIVITY", "ToolCallWorkflow", "approval_flow"]

ACTIVITY = "run_envelope"
"""The activity that runs one envelope (see examples.temporal_activities)."""

Reply = dict[str, Any]


async def approval_flow(
    call: Reply,
    run: Callable[[Reply], Awaitable[Reply]],
    wait_for_signal: Callable[[], Awaitable[None]],
) -> Reply:
    """The workflow's logic: run the call; while its approval is pending, wait, then resume."""
    reply = await run(call)
    while reply.get("status") == "pending_approval":
        await wait_for_signal()
        reply = await run({"approval_id": reply["approval_id"]})
    return reply


@workflow.defn(name="ToolCallWorkflow")
class ToolCallWorkflow:
    """One tool call, with the approval wait in between when its tool asks for one."""

    def __init__(self) -> None:
        self._signals = 0
        self._seen = 0
        self._approval_id: str | None = None

    @workflow.run
    async def run(self, call: Reply) -> Reply:
        return await approval_flow(call, self._activity, self._next_signal)

    async def _activity(self, payload: Reply) -> Reply:
        reply: Reply = await workflow.execute_activity(
            ACTIVITY,
            payload,
            result_type=dict,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=30)),
        )
        if reply.get("status") == "pending_approval":
            self._approval_id = str(reply["approval_id"])
        return reply

    async def _next_signal(self) -> None:
        await workflow.wait_condition(lambda: self._signals > self._seen)
        self._seen = self._signals

    @workflow.signal
    def decided(self) -> None:
        """The review app recorded a decision for this workflow's approval: look again."""
        self._signals += 1

    @workflow.query
    def approval_id(self) -> str | None:
        """The approval this workflow waits for (None before its call asked for one)."""
        return self._approval_id
