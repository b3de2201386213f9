"""The calls flow: one message of `tool-calls` to its reply, or to the approvals flow.

Plain calls run here (retried in place, then an error reply and a dead letter). Confirm calls
and resumes touch the approvals table, which lives with the partition that owns their
approval_id, so they are handed on as requests keyed by approval_id (contract §7).
"""

from __future__ import annotations

from typing import Any

import orjson

from stream_adapter.core.envelope import Envelope, parse_envelope
from stream_adapter.core.errors import AdapterError, RecordTooLarge
from stream_adapter.core.ids import approval_id_for, derive_ids, legacy_approval_id
from stream_adapter.core.replies import Reply
from stream_adapter.core.tools import Tool
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.engine import Delivery, Headers
from stream_adapter.stream.faults import CALL_REPLIED, crash_point
from stream_adapter.stream.tracing import traceparent

PARK = "park"
RESUME = "resume"
SWEEP = "sweep"


def park_request(envelope: Envelope, delivery: Delivery, scope: str = "") -> dict[str, Any]:
    """The internal request that parks a confirm call (its arguments already validated).

    It refers to its message by (topic, partition, offset) and key, without the message's
    bytes: the approvals flow needs only the arguments and ids carried here. scope is the
    calls topic's id, in which the call's ids were derived.
    """
    return {
        "kind": PARK,
        "scope": scope,
        "tool": envelope.tool,
        "arguments": dict(envelope.arguments),
        "run_id": envelope.run_id,
        "call_id": envelope.call_id,
        "message_id": envelope.message_id,
        "source": envelope.source,
        "delivery": delivery.to_json(value=False),
        "traceparent": traceparent(delivery.headers),
    }


def resume_request(envelope: Envelope, delivery: Delivery) -> dict[str, Any]:
    """The internal request that resumes a decided approval (its message's bytes for a dead
    letter, when they are small; a reference otherwise)."""
    return {
        "kind": RESUME,
        "approval_id": envelope.approval_id,
        "run_id": envelope.run_id,
        "call_id": envelope.call_id,
        "delivery": delivery.to_json(),
        "traceparent": traceparent(delivery.headers),
    }


LEGACY = "legacy"
"""The park request's ids as a worker before scoped ids and source-named approval ids
derived them: it goes first to that record's partition, so a call redelivered across the
upgrade answers from the record it parked then (stream/approvals.py `_park`)."""


def legacy_park(envelope: Envelope, delivery: Delivery) -> dict[str, Any] | None:
    """The call's legacy ids and approval id (see LEGACY); None for a call that could not have
    been parked before (not from a delivery)."""
    if not delivery.message_id:
        return None
    try:
        old = parse_envelope(delivery.value, message_id=delivery.message_id, source=envelope.source)
    except AdapterError:
        return None
    given = orjson.loads(delivery.value)
    return {
        "approval_id": legacy_approval_id(old.run_id, old.call_id),
        "run_id": old.run_id,
        "call_id": old.call_id,
        "derived": "run_id" not in given or "call_id" not in given,
    }


async def process_call(
    ctx: FlowContext,
    delivery: Delivery,
    *,
    envelope: Envelope | None = None,
    failed: AdapterError | None = None,
) -> None:
    """Bring one `tool-calls` message to a terminal, durable outcome; never raises AdapterError.

    envelope: the message already parsed; failed: the error of the first run of this plain
    call, made inline (both from stream/inline.py).
    """
    source = ctx.settings.source
    scope = await ctx.scope(delivery.topic)
    if envelope is None:
        try:
            envelope = parse_envelope(
                delivery.value, message_id=delivery.message_id, source=source, scope=scope
            )
        except AdapterError as exc:
            run_id, call_id = derive_ids(delivery.message_id, source, scope)
            await ctx.fail(delivery, exc, tool=None, run_id=run_id, call_id=call_id)
            return
    if envelope.approval_id is not None:
        try:
            await ctx.outputs.request(envelope.approval_id, resume_request(envelope, delivery))
        except RecordTooLarge as exc:
            await ctx.fail(
                delivery,
                exc,
                tool=None,
                run_id=envelope.run_id,
                call_id=envelope.call_id,
                approval_id=envelope.approval_id,
            )
        return
    name = envelope.tool or ""
    try:
        tool = ctx.executor.resolve(name, ctx.tools)
        if tool.confirm:
            ctx.executor.validate(tool, envelope.arguments)
    except AdapterError as exc:
        await ctx.fail(delivery, exc, tool=name, run_id=envelope.run_id, call_id=envelope.call_id)
        return
    if tool.confirm:
        request = park_request(envelope, delivery, scope)
        legacy = legacy_park(envelope, delivery)
        if legacy is None:
            approval_id = approval_id_for(envelope.run_id, envelope.call_id, envelope.source)
        else:
            request[LEGACY] = legacy
            approval_id = legacy["approval_id"]
        try:
            await ctx.outputs.request(approval_id, request)
        except RecordTooLarge as exc:
            await ctx.fail(
                delivery, exc, tool=name, run_id=envelope.run_id, call_id=envelope.call_id
            )
        return
    if ctx.tracing is None:
        await _run(ctx, delivery, envelope, tool, None, failed)
        return
    with ctx.tracing.span(
        f"tool {tool.name}",
        delivery.headers,
        tool=tool.name,
        run_id=envelope.run_id,
        call_id=envelope.call_id,
        message_id=delivery.message_id,
    ) as trace_headers:
        await _run(ctx, delivery, envelope, tool, trace_headers)


async def send_reply(ctx: FlowContext, delivery: Delivery, reply: Reply) -> None:
    """Write the reply of a call that already ran (stream/inline.py hands on big ones)."""
    try:
        await ctx.outputs.reply(reply, message_id=delivery.message_id)
    except RecordTooLarge as exc:
        await _too_large(ctx, delivery, reply, exc)
    crash_point(CALL_REPLIED)


async def _run(
    ctx: FlowContext,
    delivery: Delivery,
    envelope: Envelope,
    tool: Tool,
    trace_headers: Headers | None,
    failed: AdapterError | None = None,
) -> None:
    """Run a plain call and write its terminal outcome (trace_headers go on the reply)."""
    reply, error, attempts = await ctx.run(
        tool,
        dict(envelope.arguments),
        run_id=envelope.run_id,
        call_id=envelope.call_id,
        failed=failed,
    )
    if error is None:
        try:
            await ctx.outputs.reply(reply, message_id=delivery.message_id, headers=trace_headers)
        except RecordTooLarge as exc:
            await _too_large(ctx, delivery, reply, exc, trace_headers)
        crash_point(CALL_REPLIED)
    else:
        if ctx.tracing is not None:
            ctx.tracing.failed(error.kind)
        await ctx.fail(
            delivery,
            error,
            tool=tool.name,
            run_id=envelope.run_id,
            call_id=envelope.call_id,
            attempts=attempts,
            headers=trace_headers,
        )


async def _too_large(
    ctx: FlowContext,
    delivery: Delivery,
    reply: Reply,
    exc: RecordTooLarge,
    headers: Headers | None = None,
) -> None:
    """A call ran, but its reply is too large to write: its outcome is a small
    RecordTooLarge error reply and a dead letter of the call (the tool is not run again)."""
    error = RecordTooLarge(f"the tool ran, but its reply is too large to write: {exc.detail}")
    await ctx.fail(
        delivery,
        error,
        tool=reply["tool"],
        run_id=reply["run_id"],
        call_id=reply["call_id"],
        headers=headers,
    )
