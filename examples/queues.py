"""Queue recipes: an async consumer, a sync job, a workflow activity, a Pub/Sub push body.

Every queue hands over a body and a delivery id; handle_envelope takes both. What to do with
the message follows from the reply or the error:

| outcome | do |
|---|---|
| ``ok``, ``pending_approval``, ``already_done`` | ack |
| a retryable AdapterError (``ToolTimeout``, a retryable ``ToolFailed``) | no ack: redelivered |
| any other AdapterError (bad envelope, denied, unknown tool) | dead-letter (and ack) |
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from examples.backend import TOOLS, executor
from stream_adapter import (
    AdapterError,
    LoopRunner,
    Reply,
    ToolUsageError,
    error_reply,
    handle_envelope,
)

if TYPE_CHECKING:
    from stream_adapter.hosts.pubsub import PushVerifier

__all__ = [
    "JOB_TIMEOUT_S",
    "RUNNER",
    "Queue",
    "QueueMessage",
    "consume_once",
    "pubsub_endpoint",
    "pubsub_push",
    "pubsub_push_response",
    "push_verifier",
    "tool_activity",
    "tool_job",
]


class QueueMessage(Protocol):
    """What a queue client hands over: a stable delivery id and the raw body."""

    @property
    def id(self) -> str: ...

    @property
    def body(self) -> bytes: ...


class Queue(Protocol):
    """The three calls an async consumer needs (aiobotocore SQS, Pub/Sub pull, Arq, ...)."""

    async def receive(self) -> Sequence[QueueMessage]: ...

    async def ack(self, message: QueueMessage) -> None: ...

    async def dead_letter(self, message: QueueMessage) -> None: ...


async def consume_once(queue: Queue, *, source: str = "queue") -> list[Reply]:
    """One poll: run each message, then ack, dead-letter or leave it for redelivery."""
    replies = []
    for message in await queue.receive():
        try:
            reply = await handle_envelope(
                executor(), message.body, tools=TOOLS, message_id=message.id, source=source
            )
        except AdapterError as exc:
            if not exc.retryable:  # retrying cannot help: park it where people look
                await queue.dead_letter(message)
            continue  # retryable: no ack, the queue delivers it again
        await queue.ack(message)  # pending_approval is done too: a resume runs it later
        replies.append(reply)
    return replies


RUNNER = LoopRunner(name="jobs-loop")
"""One warm loop per worker process, shared by every job (clients stay open across jobs)."""

JOB_TIMEOUT_S = 60.0


def tool_job(payload: Mapping[str, Any], *, job_id: str = "", source: str = "job") -> Reply:
    """A sync job body (RQ, Dramatiq, Huey, Celery): errors raise, so the runner records them.

    Pass the job's id as job_id when the runner retries a job under the same id: a retried
    confirm call then finds its own approval instead of asking twice. Use one source per
    job runner.
    """
    return RUNNER.run(
        lambda: handle_envelope(executor(), payload, tools=TOOLS, message_id=job_id, source=source),
        timeout=JOB_TIMEOUT_S,
    )


async def tool_activity(payload: Mapping[str, Any], *, activity_id: str = "") -> Reply:
    """A workflow activity (Temporal): call it from an activity, never from workflow code.

    Workflow code is replayed; an activity runs once per attempt. activity_id should be stable
    across the activity's retries (for example workflow id + activity id). A
    ``pending_approval`` reply means: wait for a signal, then run a resume activity.
    """
    return await handle_envelope(
        executor(), payload, tools=TOOLS, message_id=activity_id, source="workflow"
    )


async def pubsub_push(body: Mapping[str, Any]) -> Reply:
    """A Pub/Sub push request body (base64 ``data``, a stable ``messageId``) → the reply.

    Errors raise: ToolUsageError for a body that is not a push request, else the call's
    AdapterError. ``pubsub_push_response`` turns both into an HTTP answer.
    """
    try:
        message = body["message"]
        data = base64.b64decode(message["data"], validate=True)
        message_id = str(message["messageId"])
    except (KeyError, TypeError, binascii.Error, ValueError):
        raise ToolUsageError("not a Pub/Sub push body") from None
    return await handle_envelope(
        executor(), data, tools=TOOLS, message_id=message_id, source="pubsub"
    )


async def pubsub_push_response(body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """``pubsub_push`` as ``(http_status, body)``: 200 and the reply, or the problem's status.

    Any non-2xx makes Pub/Sub push the message again. Configure a dead-letter topic with a
    maximum number of delivery attempts, so a message that can never succeed ends there.
    """
    try:
        return 200, await pubsub_push(body)
    except AdapterError as exc:
        return error_reply(exc)


PUBSUB_AUDIENCE_ENV = "STREAM_ADAPTER_PUBSUB_AUDIENCE"
PUBSUB_ACCOUNT_ENV = "STREAM_ADAPTER_PUBSUB_SERVICE_ACCOUNT"
PUBSUB_JWKS_ENV = "STREAM_ADAPTER_PUBSUB_JWKS_URL"


@functools.cache
def push_verifier() -> PushVerifier:
    """The push subscription's audience and service account, from the environment."""
    from stream_adapter.hosts.pubsub import GOOGLE_JWKS_URL, PushVerifier

    return PushVerifier(
        audience=os.environ[PUBSUB_AUDIENCE_ENV],
        service_account_email=os.environ[PUBSUB_ACCOUNT_ENV],
        jwks_url=os.environ.get(PUBSUB_JWKS_ENV, GOOGLE_JWKS_URL),
    )


async def pubsub_endpoint(
    authorization: str | None, body: Mapping[str, Any]
) -> tuple[int, dict[str, Any]]:
    """The push endpoint: verify the request's OIDC token, then run it; ``(status, body)``.

    Give it the request's ``Authorization`` header and its JSON body. A request without a
    valid token for the subscription's service account answers 401 or 403 and runs nothing.
    """
    try:
        await push_verifier().verify(authorization)
    except AdapterError as exc:
        return error_reply(exc)
    return await pubsub_push_response(body)
