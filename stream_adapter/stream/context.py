"""What the topology's flows share: settings, the executor, outputs and policies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stream_adapter.core import logs
from stream_adapter.core.errors import AdapterError
from stream_adapter.core.executor import Executor
from stream_adapter.core.replies import Reply, error_reply_body, ok_reply
from stream_adapter.core.retries import RetryPolicy, attempt
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.core.tools import Tool
from stream_adapter.settings import Settings
from stream_adapter.stream.engine import Delivery, Headers, Slots
from stream_adapter.stream.metrics import Metrics
from stream_adapter.stream.outputs import Outputs
from stream_adapter.stream.scopes import Scopes
from stream_adapter.stream.tracing import Tracing


@dataclass(frozen=True, slots=True)
class FlowContext:
    """Everything a flow needs besides the message itself."""

    settings: Settings
    executor: Executor
    tools: frozenset[str] | None
    outputs: Outputs
    policy: RetryPolicy
    keys: DecisionKeys
    metrics: Metrics | None = None
    tracing: Tracing | None = None
    """None unless OpenTelemetry is enabled: the flows then skip every tracing step."""
    tool_slots: Slots = field(default_factory=lambda: Slots(64))
    """At most max_in_flight tools run at once; waiting for acks or backoff holds no slot."""
    scopes: Scopes | None = None
    """The topic ids that make delivery ids unique (ids.derive_ids); None: no scope."""

    async def scope(self, topic: str) -> str:
        """The scope of topic's delivery ids: its topic id, waiting while the broker cannot
        name it (a call's ids must not change, so it is never derived without)."""
        if self.scopes is None:
            return ""
        scope = self.scopes.current(topic)
        if scope is not None:
            return scope
        delay = 0.2
        while True:
            try:
                return await self.scopes.get(topic)
            except AdapterError as exc:
                logs.event(
                    logs.WARNING, "topic id unknown; waiting", topic=topic, error_kind=exc.kind
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def run(
        self,
        tool: Tool,
        arguments: dict[str, object],
        *,
        run_id: str,
        call_id: str,
        approval_id: str | None = None,
        failed: AdapterError | None = None,
        gate: Callable[[], None] | None = None,
    ) -> tuple[Reply, AdapterError | None, int]:
        """Run a call with in-place retries; the terminal reply, the error if any, attempts.

        failed: the error of a first attempt made already (stream/inline.py).
        gate: called right before each attempt's tool code starts (Executor.run_tool); what
        it raises ends the run unstarted (an approved run whose partition was lost meanwhile).
        """

        metrics = self.metrics

        def on_retry(exc: AdapterError, tries: int) -> None:
            if metrics is not None:
                metrics.retried(tool.name)
            logs.event(
                logs.INFO,
                "retrying call",
                tool=tool.name,
                run_id=run_id,
                call_id=call_id,
                error_kind=exc.kind,
                attempt=tries,
            )

        started = metrics.started() if metrics is not None else 0.0
        try:

            async def run_once() -> Any:
                async with self.tool_slots:
                    return await self.executor.run_tool(
                        tool,
                        arguments,
                        run_id=run_id,
                        call_id=call_id,
                        approval_id=approval_id,
                        gate=gate,
                    )

            outcome = await attempt(run_once, self.policy, on_retry=on_retry, failed=failed)
        finally:
            if metrics is not None:
                metrics.finished(tool.name, started)
        if outcome.error is None:
            reply = ok_reply(tool.name, run_id, call_id, outcome.value, approval_id)
            return reply, None, outcome.attempts
        body = error_reply_body(
            outcome.error, tool=tool.name, run_id=run_id, call_id=call_id, approval_id=approval_id
        )
        return body, outcome.error, outcome.attempts

    async def fail(
        self,
        delivery: Delivery,
        exc: AdapterError,
        *,
        tool: str | None,
        run_id: str,
        call_id: str,
        approval_id: str | None = None,
        attempts: int = 1,
        headers: Headers | None = None,
        scope: str | None = None,
    ) -> None:
        """The terminal path of a failed message: a dead letter and an error reply.

        headers (trace context) are added to the error reply; the dead letter's are §10's.
        scope: the scope of delivery's ids (default: its topic's, when known here).
        """
        logs.event(
            logs.WARNING,
            "call failed",
            tool=tool,
            run_id=run_id,
            call_id=call_id,
            approval_id=approval_id,
            error_kind=exc.kind,
            attempt=attempts,
            message_id=delivery.message_id,
        )
        body = error_reply_body(
            exc, tool=tool, run_id=run_id, call_id=call_id, approval_id=approval_id
        )
        # The dead letter first: whoever sees the error reply can already find it.
        if scope is None and self.scopes is not None:
            scope = self.scopes.current(delivery.topic)
        await self.outputs.dead_letter(delivery, exc, attempts=attempts, scope=scope or "")
        await self.outputs.reply(body, message_id=delivery.message_id, headers=headers)
