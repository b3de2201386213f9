"""The calls flow: one message of `tool-calls` to its reply, or to the approvals flow.

Plain calls run here (retried in place, then an error reply and a dead letter). Confirm calls
and resumes touch the approvals table, which lives with the partition that owns their
approval_id, so they are handed on as requests keyed by approval_id (contract §7).
"""

from __future__ import annotations

from typing import Any

from stream_adapter.envelope import Envelope, parse_envelope
from stream_adapter.errors import AdapterError, RecordTooLarge
from stream_adapter.ids import approval_id_for, derive_ids
from stream_adapter.replies import Reply
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.engine import Delivery, Headers
from stream_adapter.stream.faults import CALL_REPLIED, crash_point
from stream_adapter.stream.tracing import traceparent
from stream_adapter.tools import Tool

PARK = "park"
RESUME = "resume"
SWEEP = "sweep"


def park_request(envelope: Envelope, delivery: Delivery) -> dict[str, Any]:
    """The internal request that parks a confirm call (its arguments already validated).

    It refers to its message by (topic, partition, offset) and key, without the message's
    bytes: the approvals flow needs only the arguments and ids carried here.
    """
    return {
        "kind": PARK,
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
    if envelope is None:
        try:
            envelope = parse_envelope(delivery.value, message_id=delivery.message_id, source=source)
        except AdapterError as exc:
            run_id, call_id = derive_ids(delivery.message_id, source)
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
        approval_id = approval_id_for(envelope.run_id, envelope.call_id)
        try:
            await ctx.outputs.request(approval_id, park_request(envelope, delivery))
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
