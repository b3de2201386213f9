"""A Lambda function over the core: the handler, the review step and an async HTTP function.

Deploy ``examples.serverless.handler`` behind SQS (turn on ReportBatchItemFailures), an
EventBridge rule, an MSK trigger or direct invokes. The approval store must be shared
(Redis or SQL): the container that parks a call is rarely the one that resumes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from examples.backend import TOOLS, executor
from stream_adapter import AdapterError, error_reply, handle_envelope, record_decision, run_sync
from stream_adapter import tool_handler as _tool_handler

__all__ = ["handler", "review", "tool_function"]

# Built once per container at import; warm invocations reuse it and the shared loop. Poison
# messages go to the dead-letter queue (its URL in the function's environment), not back.
handler = _tool_handler(
    executor(),
    tools=TOOLS,
    timeout=30,
    dead_letters=os.environ.get("STREAM_ADAPTER_SQS_DEAD_LETTER_QUEUE_URL") or None,
)


def review(
    approval_id: str,
    *,
    reviewer: str,
    approved: bool,
    send: Callable[[dict[str, Any]], None],
) -> tuple[int, dict[str, Any]]:
    """In the review app: store the decision, then queue one resume message for the handler.

    reviewer comes from the review app's own authentication, never from a request body.
    """
    status, body = run_sync(
        record_decision(executor(), approval_id, reviewer=reviewer, approved=approved),
        timeout=30,
    )
    if status == 200 and approved:
        send({"approval_id": approval_id})  # the handler runs the call once
    return status, body


async def tool_function(body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """An async HTTP function body (Cloud Run functions, Azure Functions, Modal)."""
    try:
        return 200, await handle_envelope(executor(), body, tools=TOOLS)
    except AdapterError as exc:
        return error_reply(exc)
