"""Temporal, activity side: ``run_envelope`` runs one envelope through the adapter.

    worker = Worker(client, task_queue="tool-calls", workflows=[ToolCallWorkflow],
                    activities=[run_envelope])

The delivery id is the workflow id, its run id and the activity id, which Temporal keeps across
the activity's retries: a retried attempt is the same call, and a confirm call finds its own
approval. Errors become ``ApplicationError`` named by their kind, retryable as the adapter says.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from examples.queues import tool_activity
from stream_adapter import AdapterError, Reply

__all__ = ["run_envelope"]


@activity.defn(name="run_envelope")
async def run_envelope(payload: dict[str, Any]) -> Reply:
    """One call or one resume; a reply, or an ApplicationError of the error's kind."""
    info = activity.info()
    delivery_id = f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"
    try:
        return await tool_activity(payload, activity_id=delivery_id)
    except AdapterError as exc:
        raise ApplicationError(
            exc.detail,
            {"kind": exc.kind, "status": exc.status, "approval_id": exc.approval_id},
            type=exc.kind,
            non_retryable=not exc.retryable,
        ) from None
