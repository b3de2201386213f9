"""The approvals flow: park and resume requests and reviewers' decisions, on the approvals table.

All three arrive keyed by approval_id on co-partitioned topics, so the worker that owns an
approval_id's partition holds its record. Every table write is acknowledged by the broker
before anything that depends on it: the `pending_approval` reply waits for the record, and an
approved call starts only once its `running` mark is durable, so it runs at most once.
A sweep request (from the worker's `Sweeper`) expires a pending approval nobody decided in time,
or removes a settled one past its retention with a tombstone, written like any other table
write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import orjson

from stream_adapter.core import logs
from stream_adapter.core.approvals import (
    ApprovalRecord,
    ApprovalState,
    Decision,
    Resolution,
    Step,
    apply_decision,
    apply_resolution,
    begin_run,
    denial,
    expire,
    expiry_due,
    fingerprint,
    give_up,
    log_expired,
    new_record,
    next_step,
    parse_reviewer_message,
    rerun,
    retention_due,
    run_limit_s,
    same_call,
    same_resolution,
    settled_reply,
    this_process,
)
from stream_adapter.core.envelope import MAX_RECORD_BYTES, Envelope
from stream_adapter.core.errors import (
    AdapterError,
    ApprovalConflict,
    ApprovalNotFound,
    RecordTooLarge,
    ToolNotFound,
    ToolUsageError,
)
from stream_adapter.core.ids import legacy_approval_id
from stream_adapter.core.pending import PendingCounts, TooManyPending
from stream_adapter.core.record_limits import check_parkable, finish_within
from stream_adapter.core.replies import already_done_reply, error_reply_body
from stream_adapter.core.signing import (
    KEY_ID_HEADER,
    SIGNATURE_HEADER,
    DecisionKeys,
    SignatureError,
)
from stream_adapter.stream.calls import LEGACY, PARK, RESUME, SWEEP
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.engine import Claim, Delivery, DurableTable, Headers, OwnershipLost
from stream_adapter.stream.faults import APPROVED_DONE, APPROVED_RAN, PARKED, RUNNING, crash_point
from stream_adapter.stream.tracing import as_headers

TABLE_RECORD_BYTES = MAX_RECORD_BYTES - 1024
"""Largest approval record value: a changelog record is its approval_id key and this."""


class ApprovalTable:
    """The approvals table: approval records by approval_id, each write durable before it counts.

    Exactly once, a record found here was committed, with the reply written in the same
    transaction (engine's `DurableTable`; see `ApprovalFlow._park`).
    """

    def __init__(self, table: DurableTable) -> None:
        self._table = table
        self.pending = PendingCounts(table.values)
        """Pending approvals by source in this worker's partitions (MAX_PENDING_PER_SOURCE)."""

    def get(self, approval_id: str) -> ApprovalRecord | None:
        raw = self._table.get(approval_id.encode())
        return None if raw is None else ApprovalRecord.from_bytes(raw)

    async def claim(self, partition: int) -> Claim | None:
        """This worker's ownership of partition now (OwnershipLost if it has none)."""
        return await self._table.claim(partition)

    async def put(
        self,
        record: ApprovalRecord,
        partition: int,
        *,
        now: bool = False,
        claim: Claim | None = None,
        finishing: bool = False,
    ) -> None:
        """Store record and wait until its changelog entry is acknowledged by the broker.

        Exactly once the entry joins the event's transaction, except with `now`: a run's
        `running` and `done` marks go outside it, or an abort would take them back, and the
        redone decision would run the call a second time or find its outcome lost. Writes
        outside a transaction are fenced (claim: the ownership the run started under), so a
        worker that lost the partition gets OwnershipLost and writes nothing; while a
        rebalance revokes it, only a run's outcome (`finishing`) is written.
        """
        key, value = record.approval_id.encode(), record.to_bytes()
        before = self._table.get(key)
        await self._table.put(key, value, partition, now=now, claim=claim, finishing=finishing)
        self.pending.changed(before, value)

    async def delete(self, approval_id: str, partition: int) -> None:
        """Remove a record: a tombstone on the changelog, written as `put` writes."""
        before = self._table.get(approval_id.encode())
        await self._table.put(approval_id.encode(), None, partition)
        self.pending.changed(before, None)


def signature_of(keys: DecisionKeys, headers: Mapping[str, bytes]) -> str:
    """How a decision that passed `keys.verify` was signed: `unsigned` (no signature headers:
    accepted only with ALLOW_UNSIGNED_DECISIONS), `signed` when keys checked it, `unchecked`
    (signed, but no keys to check it)."""
    if KEY_ID_HEADER not in headers and SIGNATURE_HEADER not in headers:
        return "unsigned"
    return "signed" if keys.required else "unchecked"


PARK_WAIT_S = 20.0
"""Longest a decision for an approval not parked here yet waits for its park request."""

PARK_POLL_S = 0.05


class ApprovalFlow:
    """Processes one message of the approvals channel at a time per approval_id."""

    def __init__(
        self,
        ctx: FlowContext,
        table: ApprovalTable,
        origin: str,
        requests_pending: Callable[[int], bool] | None = None,
    ) -> None:
        self.ctx = ctx
        self.table = table
        self.requests_pending = requests_pending
        """Whether a partition of the approval requests topic has records not yet handled:
        a park ahead of a decision read first (the two topics are read independently)."""
        self.origin = origin
        self.origin_host = f"{origin}@{this_process()}"
        """Who starts runs here, kept on the record: the reviewer of an unknown outcome sees
        which worker's run left none."""
        self._running: dict[str, asyncio.Event] = {}
        """Approvals whose tool runs in this worker now, set when the run is over: a record
        `running` for one of these has a live run, not a dead one. A redelivered message for
        it waits for that run and answers with its outcome, never `unknown`."""

    async def process(self, delivery: Delivery) -> None:
        """Bring one request or decision to its terminal, durable outcome; a worker that
        lost the partition meanwhile writes and answers nothing, and raises OwnershipLost:
        the message goes back unacked to the partition's next owner.

        A record too large to write ends the message with a RecordTooLarge error reply and a
        dead letter, never a retry that cannot succeed.
        """
        try:
            await self._process(delivery)
        except OwnershipLost as exc:
            logs.event(
                logs.WARNING,
                "approvals partition not owned here now; message handed back",
                partition=exc.partition,
                message_id=delivery.message_id,
                error_kind=exc.reason,
            )
            raise

    async def _process(self, delivery: Delivery) -> None:
        if delivery.topic == self.ctx.settings.decisions_topic:
            with self._traced("decision", delivery.headers) as trace:
                try:
                    await self._decision(delivery, trace)
                except RecordTooLarge as exc:
                    await self.ctx.outputs.dead_letter(delivery, exc, attempts=1)
            return
        request = orjson.loads(delivery.value)
        kind = request["kind"]
        if kind == SWEEP:
            await self._sweep(request["approval_id"], delivery.partition)
            return
        original = Delivery.from_json(request["delivery"])
        with self._traced(kind, as_headers(request.get("traceparent"))) as trace:
            try:
                if kind == PARK:
                    await self._park(request, original, delivery.partition, trace)
                elif kind == RESUME:
                    await self._resume(request, original, delivery.partition, trace)
            except RecordTooLarge as exc:
                await self.ctx.fail(
                    original,
                    exc,
                    tool=request.get("tool"),
                    run_id=request["run_id"],
                    call_id=request["call_id"],
                    approval_id=exc.approval_id or request.get("approval_id"),
                    headers=trace,
                )

    def _traced(
        self, name: str, headers: dict[str, bytes], **attributes: Any
    ) -> AbstractContextManager[Headers | None]:
        """A span continuing headers' trace context, or nothing when tracing is off."""
        if self.ctx.tracing is None:
            return nullcontext(None)
        return self.ctx.tracing.span(name, headers, **attributes)

    async def _park(
        self, request: dict[str, Any], original: Delivery, partition: int, trace: Headers | None
    ) -> None:
        envelope = Envelope(
            request["tool"],
            request["arguments"],
            request["run_id"],
            request["call_id"],
            None,
            request["message_id"],
            request["source"],
        )
        fresh = new_record(
            envelope,
            request["tool"],
            origin=self.origin,
            agent_key=original.key,
            scope=request.get("scope"),
        )
        if LEGACY in request:
            await self._park_legacy(request, fresh, original, partition, trace)
            return
        if "scope" not in request:  # sent by a worker before scopes: keyed by the legacy id
            legacy_id = legacy_approval_id(fresh.run_id, fresh.call_id)
            fresh = fresh.model_copy(update={"approval_id": legacy_id})
        record = self.table.get(fresh.approval_id)
        if record is not None and not same_call(record, fresh.tool, fresh.arguments, fresh.source):
            await self._other_call(record, fresh, original, trace)
            return
        if record is None:
            check_parkable(fresh, TABLE_RECORD_BYTES)  # refused before it could ever run
            try:
                self.table.pending.admit(
                    fresh.source, self.ctx.settings.max_pending_per_source, tool=fresh.tool
                )
            except TooManyPending as exc:  # a dead letter and a typed reply; nothing parked
                await self.ctx.fail(
                    original, exc, tool=fresh.tool, run_id=fresh.run_id, call_id=fresh.call_id
                )
                return
            await self.table.put(fresh, partition)
            crash_point(PARKED)
            logs.event(
                logs.INFO,
                "call parked",
                tool=fresh.tool,
                run_id=fresh.run_id,
                call_id=fresh.call_id,
                approval_id=fresh.approval_id,
            )
            record = fresh
        elif self.ctx.outputs.exactly_once and record.message_id == fresh.message_id:
            # The same call message parked again: redone after its transaction aborted, its
            # park request having gone outside it. The record is committed (or staged in this
            # transaction), so the reply written with it was, too: answering again would be a
            # second reply for a read_committed reader.
            logs.event(
                logs.INFO,
                "call parked again; already answered",
                tool=record.tool,
                approval_id=record.approval_id,
                state=record.state,
            )
            return
        await self._answer(record, original, partition, trace)

    async def _park_legacy(
        self,
        request: dict[str, Any],
        fresh: ApprovalRecord,
        original: Delivery,
        partition: int,
        trace: Headers | None,
    ) -> None:
        """A park request at the partition of its call's legacy approval id (calls.LEGACY):
        a record parked there before the upgrade by this very call answers it; else the
        request goes on to the call's own approval id. A legacy record of the same given ids
        with another tool, arguments or source is someone else's call: refused."""
        legacy = request[LEGACY]
        record = self.table.get(legacy["approval_id"])
        if record is not None and (record.run_id, record.call_id) == (
            legacy["run_id"],
            legacy["call_id"],
        ):
            same = same_call(record, fresh.tool, fresh.arguments, fresh.source)
            if same and (not legacy["derived"] or record.message_id == fresh.message_id):
                if self.ctx.outputs.exactly_once and record.message_id == fresh.message_id:
                    return  # answered with the record, as `_park` says
                await self._answer(record, original, partition, trace)
                return
            if not same and not legacy["derived"] and record.source == fresh.source:
                await self._other_call(record, fresh, original, trace)
                return
        onward = {key: value for key, value in request.items() if key != LEGACY}
        await self.ctx.outputs.request(fresh.approval_id, onward)

    async def _other_call(
        self,
        record: ApprovalRecord,
        fresh: ApprovalRecord,
        original: Delivery,
        trace: Headers | None,
    ) -> None:
        """A call whose ids name record's call, with another tool, arguments or source."""
        logs.event(
            logs.WARNING,
            "call refused: its ids name another call",
            tool=record.tool,
            approval_id=record.approval_id,
            error_kind=ToolUsageError.kind,
        )
        exc = ToolUsageError("run_id and call_id already name a different call")
        await self.ctx.fail(
            original,
            exc,
            tool=fresh.tool,
            run_id=fresh.run_id,
            call_id=fresh.call_id,
            headers=trace,
            scope=fresh.scope or "",
        )

    async def _resume(
        self, request: dict[str, Any], original: Delivery, partition: int, trace: Headers | None
    ) -> None:
        approval_id = request["approval_id"]
        record = self.table.get(approval_id)
        if record is None:
            exc = ApprovalNotFound(f"no approval {approval_id[:64]!r}", approval_id=approval_id)
            await self.ctx.fail(
                original,
                exc,
                tool=None,
                run_id=request["run_id"],
                call_id=request["call_id"],
                approval_id=approval_id,
                headers=trace,
            )
            return
        if record.origin != self.origin:
            exc2 = ToolUsageError("approval is owned by another origin", approval_id=approval_id)
            await self.ctx.fail(
                original,
                exc2,
                tool=record.tool,
                run_id=record.run_id,
                call_id=record.call_id,
                approval_id=approval_id,
                headers=trace,
            )
            return
        await self._answer(record, original, partition, trace)

    async def _answer(
        self, record: ApprovalRecord, original: Delivery, partition: int, trace: Headers | None
    ) -> None:
        """Reply for record's state; run it if it is approved and unused, or run it again if
        its tool is idempotent and its last run left no outcome."""
        record = await self._after_live_run(record)
        if self._expiry_due(record):
            await self._expire(record, partition, trace)
            return
        step = next_step(record, idempotent=self._idempotent(record))
        if step is Step.RUN:
            await self._run(record, partition, trace)
        elif step is Step.RERUN:
            await self._run(record, partition, trace, again=True)
        elif step is Step.DENY:
            body = record.reply or _denied_reply(record)
            await self.ctx.outputs.reply(body, message_id=record.message_id, headers=trace)
        elif step is Step.EXPIRED:
            assert record.reply is not None  # `expire` keeps the error reply
            await self.ctx.outputs.reply(record.reply, message_id=record.message_id, headers=trace)
        else:
            if step is Step.GIVE_UP:
                record = await self._give_up(record, partition)
            await self.ctx.outputs.reply(
                settled_reply(record), message_id=record.message_id, headers=trace
            )

    def _expiry_due(self, record: ApprovalRecord) -> bool:
        return expiry_due(record, self.ctx.settings.pending_expiry_s)

    async def _expire(
        self, record: ApprovalRecord, partition: int, trace: Headers | None
    ) -> ApprovalRecord:
        """pending → expired, and its agent gets the ApprovalExpired error reply."""
        expired = expire(record)
        assert expired.reply is not None
        await self.table.put(expired, partition)
        log_expired(expired)
        await self.ctx.outputs.reply(expired.reply, message_id=record.message_id, headers=trace)
        return expired

    async def _sweep(self, approval_id: str, partition: int) -> None:
        """Expire the record if nobody decided it in time, or remove it if settled past its
        retention; else leave it (it changed since the sweep asked)."""
        record = self.table.get(approval_id)
        if record is None or approval_id in self._running:
            return
        if self._expiry_due(record):
            await self._expire(record, partition, None)
        elif retention_due(record, self.ctx.settings.settled_retention_s):
            await self.table.delete(approval_id, partition)
            logs.event(
                logs.INFO,
                "settled approval removed after its retention",
                tool=record.tool,
                approval_id=approval_id,
                state=record.state,
            )

    async def _give_up(self, record: ApprovalRecord, partition: int) -> ApprovalRecord:
        """running → unknown for a run that died here and may not run again: a person
        resolves it (`_resolution`)."""
        unknown = give_up(record)
        await self.table.put(unknown, partition)
        logs.event(
            logs.WARNING,
            "approved call outcome unknown; a person resolves it",
            tool=record.tool,
            run_id=record.run_id,
            call_id=record.call_id,
            approval_id=record.approval_id,
            runs=record.runs,
            started_by=record.started_by,
        )
        return unknown

    async def _parked_meanwhile(self, approval_id: str, partition: int) -> ApprovalRecord | None:
        """approval_id's record once its park request is handled, while the requests
        partition still has records to handle (up to PARK_WAIT_S).

        A new owner reads the requests and decisions topics from their committed offsets at
        once: a decision can come before the park of its own call, which the previous owner
        had answered but not committed. Without the wait it would find no record and be lost.
        """
        if self.requests_pending is None:
            return None
        deadline = asyncio.get_running_loop().time() + PARK_WAIT_S
        while self.requests_pending(partition):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(PARK_POLL_S)
            record = self.table.get(approval_id)
            if record is not None:
                return record
        return self.table.get(approval_id)

    async def _decided_record(self, delivery: Delivery) -> ApprovalRecord | None:
        """The record a decision names, if it parses and the record is here (after its park,
        when that is still to be handled): its signature must be bound to that record
        (`approvals.fingerprint`)."""
        try:
            approval_id = parse_reviewer_message(delivery.value).approval_id
        except ToolUsageError:
            return None
        record = self.table.get(approval_id)
        if record is None:
            record = await self._parked_meanwhile(approval_id, delivery.partition)
        return record

    async def _decision(self, delivery: Delivery, trace: Headers | None) -> None:
        decided = await self._decided_record(delivery)
        binds = "" if decided is None else fingerprint(decided)
        try:
            self.ctx.keys.verify(delivery.value, delivery.headers, binds=binds)
        except SignatureError as exc:
            self._count_decision("unsigned" if exc.reason == "unsigned" else "invalid")
            logs.event(
                logs.WARNING,
                "security: decision rejected",
                event="bad_signature",
                message_id=delivery.message_id,
                error_kind=exc.reason,
            )
            error = ToolUsageError(f"decision {exc.reason}", status=401)
            await self.ctx.outputs.dead_letter(delivery, error, attempts=1)
            return
        self._count_decision(signature_of(self.ctx.keys, delivery.headers))
        try:
            message = parse_reviewer_message(delivery.value)
        except ToolUsageError as exc:
            logs.event(
                logs.WARNING,
                "malformed decision",
                message_id=delivery.message_id,
                error_kind=exc.kind,
            )
            await self.ctx.outputs.dead_letter(delivery, exc, attempts=1)
            return
        if delivery.key != message.approval_id.encode():
            await self._rekeyed(delivery, message.approval_id)
            return
        record = self.table.get(message.approval_id)
        if record is None:
            logs.event(
                logs.WARNING,
                "decision for an unknown approval",
                approval_id=message.approval_id[:64],
                error_kind=ApprovalNotFound.kind,
            )
            missing = ApprovalNotFound("no such approval", approval_id=message.approval_id)
            await self.ctx.outputs.dead_letter(delivery, missing, attempts=1)
            return
        record = await self._after_live_run(record)
        if isinstance(message, Resolution):
            await self._resolution(record, message, delivery, trace)
        else:
            await self._verdict(record, message, delivery, trace)

    async def _rekeyed(self, delivery: Delivery, approval_id: str) -> None:
        """Refuse a decision whose Kafka key is not its approval_id: it was read on another
        partition than its record's, whose changelog would then hold two histories of one
        record. It goes to the dead-letter topic; the record stays as it is."""
        logs.event(
            logs.WARNING,
            "security: decision refused; its key is not its approval_id",
            event="decision_rekeyed",
            approval_id=approval_id[:64],
            message_id=delivery.message_id,
        )
        error = ToolUsageError("decision key is not its approval_id", approval_id=approval_id)
        await self.ctx.outputs.dead_letter(delivery, error, attempts=1)

    async def _verdict(
        self, record: ApprovalRecord, decision: Decision, delivery: Delivery, trace: Headers | None
    ) -> None:
        """Apply an approve/deny decision; a later one answers from the record."""
        if self._expiry_due(record):
            record = await self._expire(record, delivery.partition, trace)
        decided, changed = apply_decision(record, decision)
        step = next_step(record, idempotent=self._idempotent(record))
        if not changed and step is Step.RERUN:
            await self._run(record, delivery.partition, trace, again=True)
            return
        if not changed and step is Step.GIVE_UP:
            record = await self._give_up(record, delivery.partition)
        if not changed:
            self._log_late(record, decision.approved)
            await self.ctx.outputs.reply(
                _used_reply(record), message_id=record.message_id, headers=trace
            )
            return
        if self.ctx.metrics is not None:
            self.ctx.metrics.decided(
                record.tool, decision.approved, record.requested_at, decided.decided_at
            )
        logs.event(
            logs.INFO,
            "approval decided",
            tool=record.tool,
            run_id=record.run_id,
            call_id=record.call_id,
            approval_id=record.approval_id,
            state=decided.state,
        )
        if decided.state is ApprovalState.DENIED:
            body = _denied_reply(decided)
            await self.table.put(decided.model_copy(update={"reply": body}), delivery.partition)
            await self.ctx.outputs.reply(body, message_id=record.message_id, headers=trace)
            return
        await self._run(decided, delivery.partition, trace)

    def _count_decision(self, signature: str) -> None:
        if self.ctx.metrics is not None:
            self.ctx.metrics.decision_read(signature)

    async def _resolution(
        self,
        record: ApprovalRecord,
        resolution: Resolution,
        delivery: Delivery,
        trace: Headers | None,
    ) -> None:
        """A person's finding about an unknown outcome: `ran` answers the agent ok with the
        given result; `not_run` runs the call once more, fresh. Anything else is refused to the
        dead-letter topic, and the record stays as it is."""
        if same_resolution(record, resolution):
            # Redelivered after it was applied: answer from the record as a resume would.
            await self._answer(record, delivery, delivery.partition, trace)
            return
        try:
            resolved = apply_resolution(record, resolution)
        except (ApprovalConflict, ToolUsageError) as exc:
            logs.event(
                logs.WARNING,
                "resolution refused",
                tool=record.tool,
                approval_id=record.approval_id,
                state=record.state,
                error_kind=exc.kind,
            )
            await self.ctx.outputs.dead_letter(delivery, exc, attempts=1)
            return
        logs.event(
            logs.INFO,
            "unknown outcome resolved",
            tool=record.tool,
            run_id=record.run_id,
            call_id=record.call_id,
            approval_id=record.approval_id,
            resolution=resolution.resolution,
        )
        if resolved.state is ApprovalState.APPROVED:
            await self._run(resolved, delivery.partition, trace)
            return
        assert resolved.reply is not None
        await self.table.put(resolved, delivery.partition)
        await self.ctx.outputs.reply(resolved.reply, message_id=record.message_id, headers=trace)

    async def _after_live_run(self, record: ApprovalRecord) -> ApprovalRecord:
        """record, or, while this worker runs its call, the record once no run of it is live
        here: a run that ended with no outcome stored may wake another waiter first, which
        starts the next run before this one looks."""
        over = self._running.get(record.approval_id)
        if over is None:
            return record
        while over is not None:
            await over.wait()
            over = self._running.get(record.approval_id)
        return self.table.get(record.approval_id) or record

    def _idempotent(self, record: ApprovalRecord) -> bool:
        """Whether record's tool may run again after a run that left no outcome."""
        if record.state is not ApprovalState.RUNNING or record.approval_id in self._running:
            return False
        try:
            return self.ctx.executor.resolve(record.tool, self.ctx.tools).idempotent
        except ToolNotFound:
            return False

    async def _run(
        self, record: ApprovalRecord, partition: int, trace: Headers | None, *, again: bool = False
    ) -> None:
        """Run an approved call: `running` (with its run count) is durable before the tool
        starts, so a non-idempotent call runs at most once and an idempotent one at most
        MAX_RUNS times."""
        limit_s = self._run_limit_s(record)
        running = (
            rerun(record, by=self.origin_host, limit_s=limit_s)
            if again
            else begin_run(record, by=self.origin_host, limit_s=limit_s)
        )
        over = self._running[record.approval_id] = asyncio.Event()  # before any await
        try:
            # The ownership this run starts under: its outcome is written only while it lasts.
            claim = await self.table.claim(partition)
            await self.table.put(running, partition, now=True, claim=claim)
        except BaseException:
            del self._running[record.approval_id]
            over.set()
            raise
        if again:
            logs.event(
                logs.WARNING,
                "idempotent approved call run again",
                tool=record.tool,
                run_id=record.run_id,
                call_id=record.call_id,
                approval_id=record.approval_id,
                runs=running.runs,
            )
        crash_point(RUNNING)
        ids = {
            "run_id": record.run_id,
            "call_id": record.call_id,
            "approval_id": record.approval_id,
        }
        try:
            with self._traced(f"tool {record.tool}", {}, tool=record.tool, **ids) as inner:
                try:
                    tool = self.ctx.executor.resolve(record.tool, self.ctx.tools)
                    reply, error, _ = await self.ctx.run(
                        tool,
                        dict(record.arguments),
                        run_id=record.run_id,
                        call_id=record.call_id,
                        approval_id=record.approval_id,
                        gate=None if claim is None else claim.ensure_current,
                    )
                except AdapterError as exc:
                    reply, error = error_reply_body(exc, tool=record.tool, **ids), exc
                if error is not None and self.ctx.tracing is not None:
                    self.ctx.tracing.failed(error.kind)
            crash_point(APPROVED_RAN)
            if error is not None:
                logs.event(
                    logs.WARNING,
                    "approved call failed",
                    tool=record.tool,
                    error_kind=error.kind,
                    **ids,
                )
            # Outside the transaction too: an abort must not take back an outcome the tool
            # produced, or the redone decision would find the call `running` and answer
            # `unknown` (or run an idempotent tool once more).
            done = finish_within(running, reply, TABLE_RECORD_BYTES)
            reply = done.reply or reply
            try:
                await self.table.put(done, partition, now=True, claim=claim, finishing=True)
            except OwnershipLost as exc:
                # The partition may have changed hands during the run: this outcome is
                # dropped, and the decision goes back to the owner, which finds the record
                # `running` with no live run (`unknown`, listed for a reviewer).
                logs.event(
                    logs.ERROR,
                    "approved call outcome discarded: partition no longer owned here",
                    tool=record.tool,
                    partition=exc.partition,
                    error_kind=exc.reason,
                    ok=error is None,
                    **ids,
                )
                raise
        finally:
            del self._running[record.approval_id]
            over.set()
        crash_point(APPROVED_DONE)
        await self.ctx.outputs.reply(reply, message_id=record.message_id, headers=inner or trace)

    def _run_limit_s(self, record: ApprovalRecord) -> float:
        """The longest a run of record's tool may take, all its attempts included."""
        try:
            timeout_s = self.ctx.executor.resolve(record.tool, self.ctx.tools).timeout_s
        except ToolNotFound:
            timeout_s = None
        policy = self.ctx.policy
        return run_limit_s(
            timeout_s,
            self.ctx.settings.max_run_s,
            attempts=policy.attempts,
            backoff_cap_s=policy.cap_s,
        )

    def _log_late(self, record: ApprovalRecord, approved: bool) -> None:
        conflicting = record.state is ApprovalState.EXPIRED or (
            (record.state is ApprovalState.DENIED) == approved
        )
        logs.event(
            logs.WARNING if conflicting else logs.INFO,
            "conflicting decision ignored" if conflicting else "repeated decision ignored",
            tool=record.tool,
            approval_id=record.approval_id,
            state=record.state,
        )


def _denied_reply(record: ApprovalRecord) -> dict[str, Any]:
    return error_reply_body(
        denial(record),
        tool=record.tool,
        run_id=record.run_id,
        call_id=record.call_id,
        approval_id=record.approval_id,
    )


def _used_reply(record: ApprovalRecord) -> dict[str, Any]:
    """already_done for a decision that came after the first (or after the approval expired);
    pending cannot occur here."""
    if record.state in (ApprovalState.DENIED, ApprovalState.EXPIRED):
        outcome = record.reply or _denied_reply(record)
        return already_done_reply(
            record.tool, record.run_id, record.call_id, record.approval_id, outcome
        )
    return settled_reply(record)
