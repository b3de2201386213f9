"""handle_envelope and record_decision: one call or resume, broker-agnostic (contract §5, §7)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stream_adapter.core import logs
from stream_adapter.core.approvals import (
    ApprovalRecord,
    ApprovalState,
    ApprovalStore,
    Decision,
    Resolution,
    Step,
    denial,
    expiry,
    new_record,
    next_step,
    same_call,
    settled_reply,
    utc_now,
)
from stream_adapter.core.budget import reserve
from stream_adapter.core.envelope import Envelope, parse_envelope
from stream_adapter.core.errors import (
    AdapterError,
    ApprovalConflict,
    ApprovalInProgress,
    ApprovalNotFound,
    ToolFailed,
    ToolNotFound,
    ToolUsageError,
    error_reply,
)
from stream_adapter.core.executor import Executor
from stream_adapter.core.ids import legacy_approval_id
from stream_adapter.core.replies import Reply, error_reply_body, ok_reply
from stream_adapter.core.tools import Tool, ToolNames
from stream_adapter.hosts.backend import Backend, executor_of

__all__ = ["handle_envelope", "park_once", "record_decision", "rerun_after", "resolve_outcome"]


async def handle_envelope(
    executor: Executor,
    payload: bytes | str | Mapping[str, Any],
    *,
    tools: ToolNames | None = None,
    message_id: str = "",
    source: str = "",
) -> Reply:
    """Run one call (or resume one decided approval) and return an ok, pending_approval or
    already_done reply; every other outcome raises a typed AdapterError.
    """
    envelope = parse_envelope(payload, message_id=message_id, source=source)
    if envelope.approval_id is not None:
        return await _resume(executor, envelope.approval_id, tools)
    assert envelope.tool is not None
    tool = executor.resolve(envelope.tool, tools)
    if tool.confirm:
        return await _park(executor, envelope, tool)
    result = await executor.run_tool(
        tool, envelope.arguments, run_id=envelope.run_id, call_id=envelope.call_id
    )
    return ok_reply(tool.name, envelope.run_id, envelope.call_id, result)


def _store(executor: Executor, tool: str | None) -> ApprovalStore:
    if executor.store is None:
        logs.event(logs.ERROR, "approval needs a store; executor has none", tool=tool)
        raise ToolFailed("this executor has no approval store", retryable=False, tool=tool)
    return executor.store


def _owned(executor: Executor, record: ApprovalRecord) -> ApprovalRecord:
    if record.origin != executor.origin:
        logs.event(
            logs.WARNING,
            "approval belongs to another origin",
            tool=record.tool,
            approval_id=record.approval_id,
            origin=record.origin,
            error_kind=ToolUsageError.kind,
        )
        raise ToolUsageError(
            "this approval is resumed by its own origin", approval_id=record.approval_id
        )
    return record


async def _park(executor: Executor, envelope: Envelope, tool: Tool) -> Reply:
    """Park a confirm call once; a redelivered call answers from its existing record."""
    store = _store(executor, tool.name)
    tool.validate(envelope.arguments)  # a reviewer never sees a call that cannot run
    record = await park_once(store, new_record(envelope, tool.name, origin=executor.origin))
    _owned(executor, record)
    if not same_call(record, tool.name, envelope.arguments, envelope.source):
        raise ToolUsageError(
            "run_id and call_id already name a different call", approval_id=record.approval_id
        )
    logs.event(
        logs.INFO,
        "call parked",
        tool=tool.name,
        run_id=record.run_id,
        call_id=record.call_id,
        approval_id=record.approval_id,
        state=record.state,
    )
    return await _answer(executor, record, tool=tool)


async def park_once(store: ApprovalStore, fresh: ApprovalRecord) -> ApprovalRecord:
    """Park fresh unless its call is parked: the stored record, under its approval id or,
    written before approval ids named their source, under its legacy id (same source)."""
    old = await store.get(legacy_approval_id(fresh.run_id, fresh.call_id))
    if old is not None and old.source == fresh.source:
        return old
    return await store.park(fresh)


async def _resume(executor: Executor, approval_id: str, tools: ToolNames | None) -> Reply:
    store = _store(executor, None)
    record = await store.get(approval_id)
    if record is None:
        raise ApprovalNotFound(f"no approval {approval_id[:80]!r}", approval_id=approval_id)
    _owned(executor, record)
    return await _answer(executor, record, tool=None, tools=tools)


async def _answer(
    executor: Executor,
    record: ApprovalRecord,
    *,
    tool: Tool | None,
    tools: ToolNames | None = None,
) -> Reply:
    """The reply for record's state; an approved record is claimed and run at most once, and
    a run that died is run again only for an idempotent tool. A resume meeting a run live in
    this process waits for it and answers its outcome."""
    if record.state in (ApprovalState.APPROVED, ApprovalState.RUNNING):
        record = await _after_live_run(executor, record)
    if record.state is ApprovalState.RUNNING and tool is None:
        tool = _tool_or_none(executor, record.tool, tools)
    idempotent = tool is not None and tool.idempotent
    rerun_after_s = rerun_after(tool)
    step = next_step(record, idempotent=idempotent, rerun_after_s=rerun_after_s)
    if step is Step.DENY:
        raise denial(record)
    if step is Step.EXPIRED:
        raise expiry(record)
    if step is Step.BUSY:
        raise ApprovalInProgress(
            "the approved call may still be running in another process; deliver it again later",
            tool=record.tool,
            run_id=record.run_id,
            call_id=record.call_id,
            approval_id=record.approval_id,
        )
    if step is Step.GIVE_UP:
        record, moved = await _store(executor, record.tool).give_up(
            record.approval_id, idempotent=idempotent, rerun_after_s=rerun_after_s
        )
        if moved:
            logs.event(
                logs.WARNING,
                "approved call outcome unknown; a person resolves it",
                tool=record.tool,
                approval_id=record.approval_id,
                runs=record.runs,
                started_by=record.started_by,
            )
        return settled_reply(record)
    if step not in (Step.RUN, Step.RERUN):
        return settled_reply(record)
    tool = tool or executor.resolve(record.tool, tools)
    store = _store(executor, tool.name)
    if not executor.live_runs.start(record.approval_id):
        # Another resume here took the slot since this one looked: wait for it.
        return await _answer(executor, record, tool=tool, tools=tools)
    try:
        # Within a host's time budget, a run that cannot finish in time is not started at all.
        with reserve(tool.timeout_s, tool=tool.name, approval_id=record.approval_id):
            if step is Step.RUN:
                record, won = await store.claim(record.approval_id)
            else:
                record, won = await store.reclaim(record.approval_id, rerun_after_s=rerun_after_s)
            if won:
                return await _run_claimed(executor, store, tool, record)
    finally:
        executor.live_runs.end(record.approval_id)
    return await _answer(executor, record, tool=tool, tools=tools)


async def _after_live_run(executor: Executor, record: ApprovalRecord) -> ApprovalRecord:
    """record, or, when a resume in this process held its run, the record once that is over."""
    if not await executor.live_runs.wait(record.approval_id):
        return record
    return await _store(executor, record.tool).get(record.approval_id) or record


async def _run_claimed(
    executor: Executor, store: ApprovalStore, tool: Tool, record: ApprovalRecord
) -> Reply:
    """Run a claimed approval and finish its record with the terminal reply."""
    ids = {"run_id": record.run_id, "call_id": record.call_id, "approval_id": record.approval_id}
    try:
        result = await executor.run_tool(
            tool,
            record.arguments,
            run_id=record.run_id,
            call_id=record.call_id,
            approval_id=record.approval_id,
        )
    except AdapterError as exc:
        exc.retryable = False  # the decision is used: this approval never runs again
        await _finish(store, record, error_reply_body(exc, tool=tool.name, **ids))
        raise
    reply = ok_reply(tool.name, record.run_id, record.call_id, result, record.approval_id)
    await _finish(store, record, reply)
    return reply


RERUN_GRACE_S = 30.0
"""Added to a tool's timeout before a host takes its run for dead."""
RERUN_AFTER_DEFAULT_S = 900.0
"""When the tool has no timeout: the longest a serverless invocation lives (Lambda's 15 min)."""


def rerun_after(tool: Tool | None) -> float:
    """How old a run of tool must be before a host takes it for dead and runs it again.

    A host cannot tell a dead run from one still going in another process, so it waits until
    the run is surely past its timeout; until then a redelivery fails retryably
    (ApprovalInProgress) and the queue delivers it again later. A run in this same process is
    known live: a resume waits for it instead (live_runs.py).
    """
    if tool is None or tool.timeout_s is None:
        return RERUN_AFTER_DEFAULT_S
    return tool.timeout_s + RERUN_GRACE_S


def _tool_or_none(executor: Executor, name: str, tools: ToolNames | None) -> Tool | None:
    try:
        return executor.resolve(name, tools)
    except ToolNotFound:
        return None


async def _finish(store: ApprovalStore, record: ApprovalRecord, reply: Reply) -> None:
    """running → done; an idempotent rerun racing another one may find it done already."""
    try:
        await store.finish(record.approval_id, reply)
    except ApprovalConflict:
        if record.runs <= 1:
            raise


async def record_decision(
    executor: Executor | Backend,
    approval_id: str,
    *,
    reviewer: str,
    approved: bool,
    reason: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """Store a reviewer's decision: (200, record), (400, 404 or 409 problem).

    Takes the executor or the Backend holding it. The reviewer must come from the caller's
    credential, never from a request body.
    """
    return await _record_finding(
        executor,
        Decision,
        approval_id=approval_id,
        reviewer=reviewer,
        approved=approved,
        reason=reason,
    )


async def resolve_outcome(
    executor: Executor | Backend,
    approval_id: str,
    *,
    reviewer: str,
    ran: bool,
    result: Any = None,
    reason: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """Store a person's finding about an unknown outcome: (200, record), (400, 404 or 409
    problem).

    Takes the executor or the Backend holding it. `ran=True` settles it: the next resume
    answers with an ok reply carrying `result`. `ran=False` approves it again, once: the next
    resume runs it fresh. The reviewer must come from the caller's credential, never from a
    request body.
    """
    return await _record_finding(
        executor,
        Resolution,
        approval_id=approval_id,
        reviewer=reviewer,
        resolution="ran" if ran else "not_run",
        result=result,
        reason=reason,
    )


_WORDING: dict[type[Decision | Resolution], tuple[str, str, str]] = {
    Decision: ("decision", "later decision ignored", "decision recorded"),
    Resolution: ("resolution", "resolution refused", "unknown outcome resolved"),
}
"""Per kind of finding: its name in a malformed-input problem, the conflict and success logs."""


async def _record_finding(
    target: Executor | Backend,
    kind: type[Decision | Resolution],
    *,
    approval_id: str,
    reviewer: str,
    **fields: Any,
) -> tuple[int, dict[str, Any]]:
    """Apply a reviewer's Decision or Resolution to this origin's record in the executor's
    store, answered as (status, record or problem) for the review surfaces."""
    executor = executor_of(target)
    store = _store(executor, None)
    noun, refused, recorded = _WORDING[kind]
    try:
        finding = kind(approval_id=approval_id, reviewer=reviewer, decided_at=utc_now(), **fields)
        record = await store.get(approval_id)
        if record is None:
            raise ApprovalNotFound(f"no approval {approval_id[:80]!r}", approval_id=approval_id)
        _owned(executor, record)
        if isinstance(finding, Resolution):
            record = await store.resolve(approval_id, finding)
        else:
            record = await store.decide(approval_id, finding)
    except (ApprovalNotFound, ApprovalConflict, ToolUsageError) as exc:
        if isinstance(exc, ApprovalConflict):
            logs.event(
                logs.WARNING,
                refused,
                approval_id=approval_id,
                error_kind=exc.kind,
                reviewer=reviewer,
            )
        return error_reply(exc)
    except ValueError:
        return error_reply(ToolUsageError(f"malformed {noun}"))
    logs.event(
        logs.INFO,
        recorded,
        tool=record.tool,
        approval_id=approval_id,
        state=record.state,
        resolution=record.resolution if kind is Resolution else None,
        reviewer=reviewer,
    )
    return 200, record.model_dump(mode="json", exclude_none=True)
