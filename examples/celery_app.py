"""Celery: a task that runs one envelope, acked late so a lost worker's call is delivered again.

    celery -A examples.celery_app worker --concurrency 4

``STREAM_ADAPTER_CELERY_BROKER`` names the broker (Redis here; RabbitMQ works the same) and
``STREAM_ADAPTER_CELERY_BACKEND`` the result backend. Producers send
``run_envelope.delay({"tool": ..., "arguments": ...})``; a reviewer's resume is
``run_envelope.delay({"approval_id": ...})``.

- The task id is the delivery id: a redelivered message and a retry keep it, so they are the
  same call (a confirm call finds its own approval instead of asking twice).
- Acked late, and requeued when the process running it dies: a call is never lost with a
  worker. Tools therefore run at least once; make side effects idempotent with ``call_id``.
- A retryable AdapterError retries the task (same id) with backoff; any other fails it, and
  Celery records the error in the result backend. Nothing else is ever retried.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from celery import Celery, Task

from examples.queues import tool_job
from stream_adapter import AdapterError, Reply

__all__ = [
    "BACKEND_ENV",
    "BROKER_ENV",
    "NAMESPACE_ENV",
    "QUEUE_ENV",
    "VISIBILITY_ENV",
    "app",
    "run_envelope",
]

BROKER_ENV = "STREAM_ADAPTER_CELERY_BROKER"
BACKEND_ENV = "STREAM_ADAPTER_CELERY_BACKEND"
QUEUE_ENV = "STREAM_ADAPTER_CELERY_QUEUE"
VISIBILITY_ENV = "STREAM_ADAPTER_CELERY_VISIBILITY_TIMEOUT_S"

NAMESPACE_ENV = "STREAM_ADAPTER_CELERY_NAMESPACE"
VISIBILITY_TIMEOUT_S = float(os.environ.get(VISIBILITY_ENV, 3600))

app = Celery(
    "stream_adapter_tools",
    broker=os.environ.get(BROKER_ENV, "redis://127.0.0.1:6379/0"),
    backend=os.environ.get(BACKEND_ENV, "redis://127.0.0.1:6379/0"),
)
app.conf.update(
    task_acks_late=True,  # ack when the task has returned, not when it was received
    task_reject_on_worker_lost=True,  # the process running it died: deliver it again
    worker_prefetch_multiplier=1,  # a worker holds only the calls it is running
    task_track_started=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_default_queue=os.environ.get(QUEUE_ENV, "tool-calls"),
    # Redis: a message not acked within the visibility timeout (its worker was killed, say)
    # goes to another worker. Keep it above the longest tool timeout, or a slow call runs
    # twice; workers look for such messages every few seconds.
    broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT_S,
        "unacked_restore_interval": max(1.0, min(10.0, VISIBILITY_TIMEOUT_S / 4)),
        "unacked_restore_throttle": 1,
        # A worker killed while it holds the sweep's lock delays other sweeps this long.
        "unacked_mutex_expire": max(5.0, min(300.0, VISIBILITY_TIMEOUT_S)),
        # Every key Celery writes (queues, unacked messages) carries this prefix.
        "global_keyprefix": os.environ.get(NAMESPACE_ENV, ""),
    },
    broker_connection_retry_on_startup=True,
)


@app.task(bind=True, name="stream_adapter.run_envelope", max_retries=5)
def run_envelope(self: Task, payload: Mapping[str, Any]) -> Reply:
    """Run one envelope (a call or a resume); its ids derive from the task id."""
    try:
        return tool_job(payload, job_id=str(self.request.id), source="celery")
    except AdapterError as exc:
        if exc.retryable:
            delay_s = min(2 ** (self.request.retries or 0), 30)
            raise self.retry(exc=exc, countdown=delay_s) from None
        raise
