"""Writing decisions: signed when keys are configured, and only for records the view shows pending.

The view may lag the table, so two decisions for one approval can still both be written (two
service instances, or the CLI racing the page). That residual race is safe: the topology applies
the first decision it reads and answers later ones `already_done` without running anything. Within
one process, `Decider` remembers what it sent, so a second decision never leaves this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from aiokafka import AIOKafkaProducer
from pydantic import ValidationError

from stream_adapter.core import logs
from stream_adapter.core._json import JSONError, dumps
from stream_adapter.core.approvals import (
    MAX_DECISION_BYTES,
    ApprovalRecord,
    ApprovalState,
    Decision,
    Resolution,
    check_run_over,
    fingerprint,
    parse_reviewer_message,
    utc_now,
)
from stream_adapter.core.errors import (
    ApprovalConflict,
    ApprovalNotFound,
    BrokerError,
    ToolUsageError,
)
from stream_adapter.core.signing import DecisionKeys, announce
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.review.view import ApprovalsView
from stream_adapter.settings import Settings

LANDED_TIMEOUT_S = 5.0
MAX_REFUSALS = 50
"""Refusals a Decider keeps to show (the latest)."""


def decision_message(
    decision: Decision | Resolution, keys: DecisionKeys, record: ApprovalRecord | None
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The value bytes and headers of a decision or resolution; signed when keys are
    configured, bound to the record it decides (`approvals.fingerprint`), so it decides that
    call only. A resolution keeps `result` even when it is null. ToolUsageError when the
    worker would refuse the value (checked with the worker's own parser and limits)."""
    value = checked_value(decision)
    binds = "" if record is None else fingerprint(record)
    headers = list(keys.sign(value, binds=binds).items()) if keys.required else []
    return value, headers


def checked_value(decision: Decision | Resolution) -> bytes:
    """The value bytes of decision, or ToolUsageError when the worker could not read them: an
    integer past 64 bits, nesting past the JSON depth limit, or more than MAX_DECISION_BYTES."""
    body = decision.model_dump(exclude_none=True)
    if isinstance(decision, Resolution) and decision.resolution == "ran":
        body["result"] = decision.result
    try:
        value = dumps(body)
    except JSONError as exc:
        raise ToolUsageError(f"the workers cannot read this result: {exc}") from None
    if len(value) > MAX_DECISION_BYTES:
        raise ToolUsageError(f"a decision is at most {MAX_DECISION_BYTES} bytes as JSON")
    parse_reviewer_message(value)  # what the worker does with it (ToolUsageError if refused)
    return value


class DecisionWriter:
    """Produces decisions to the decisions topic, keyed by approval_id, acknowledged by all ISRs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = DecisionKeys.from_settings(settings)
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        announce(self.keys)  # no keys: the workers would refuse every decision written here
        producer = kafka_clients.producer(
            self.settings,
            enable_idempotence=True,
            client_id=f"{self.settings.app_id}-review-decisions",
        )
        self._producer = await kafka_clients.start(self.settings, producer)

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def write(self, decision: Decision | Resolution, record: ApprovalRecord) -> None:
        """Produce decision on record and wait for the broker's acknowledgement."""
        assert self._producer is not None, "start() first"
        value, headers = decision_message(decision, self.keys, record)
        try:
            await self._producer.send_and_wait(
                self.settings.decisions_topic,
                value,
                key=decision.approval_id.encode(),
                headers=headers,
            )
        except Exception as exc:
            logs.event(
                logs.ERROR,
                "decision not written",
                approval_id=decision.approval_id,
                error_kind=type(exc).__name__,
            )
            refused = kafka_clients.kafka_error(exc, f"write {self.settings.decisions_topic}")
            if not refused.retryable:
                raise refused from None
            raise BrokerError("the decision could not be written; try again") from None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a decision: `record` once the view shows it decided, else None (sent)."""

    decision: Decision
    record: ApprovalRecord | None


@dataclass(frozen=True, slots=True)
class Resolved:
    """What became of a resolution: `record` once the view shows it applied, else None."""

    resolution: Resolution
    record: ApprovalRecord | None


class Decider:
    """Checks the view, writes the decision, and waits briefly until the table shows it."""

    def __init__(self, view: ApprovalsView, writer: DecisionWriter) -> None:
        self.view = view
        self.writer = writer
        self._sent: dict[str, Decision] = {}
        self._resolving: dict[str, Resolution] = {}
        self._resolved_before: dict[str, str | None] = {}
        self._refused: dict[str, str] = {}

    def _refuse(self, approval_id: str, why: str) -> None:
        self._refused.pop(approval_id, None)
        self._refused[approval_id] = why
        while len(self._refused) > MAX_REFUSALS:
            del self._refused[next(iter(self._refused))]

    def refusals(self) -> dict[str, str]:
        """Why the worker refuses what this process sent, by approval_id (the latest
        MAX_REFUSALS), as far as the view shows it: the approval left the state the decision
        or resolution was for, or another one came first."""
        for approval_id in list(self._sent):
            self.sent(approval_id)
        for approval_id in list(self._resolving):
            self.resolution_sent(approval_id)
        return dict(self._refused)

    def sent(self, approval_id: str) -> Decision | None:
        """The decision this process wrote for approval_id and the view does not show yet."""
        decision = self._sent.get(approval_id)
        record = self.view.get(approval_id)
        if (
            decision is not None
            and record is not None
            and record.state is not ApprovalState.PENDING
        ):
            del self._sent[approval_id]
            if record.reviewer != decision.reviewer or (
                (record.state is ApprovalState.DENIED) == decision.approved
            ):
                by = f" by {record.reviewer}" if record.reviewer else ""
                self._refuse(approval_id, f"Not decided: approval is {record.state}{by}")
            return None
        if decision is not None and record is None:
            del self._sent[approval_id]
            self._refuse(approval_id, "Not decided: no such approval")
            return None
        return decision

    def check(self, approval_id: str) -> ApprovalRecord:
        """The record if a decision may be written now; ApprovalNotFound or ApprovalConflict."""
        record = self.view.get(approval_id)
        if record is None:
            raise ApprovalNotFound("no such approval", approval_id=approval_id)
        if record.state is not ApprovalState.PENDING:
            by = f" by {record.reviewer}" if record.reviewer else ""
            raise ApprovalConflict(
                f"approval is {record.state}{by}, not pending", approval_id=approval_id
            )
        if self.sent(approval_id) is not None:
            raise ApprovalConflict("a decision was already sent", approval_id=approval_id)
        return record

    async def decide(
        self,
        approval_id: str,
        *,
        approved: bool,
        reviewer: str,
        reason: str | None = None,
        wait_s: float = LANDED_TIMEOUT_S,
    ) -> Outcome:
        """Write a decision on a pending record and wait up to wait_s for the table to show it."""
        record = self.check(approval_id)  # no await between the check and the mark below
        try:
            decision = Decision(
                approval_id=approval_id,
                approved=approved,
                reviewer=reviewer,
                reason=reason or None,
                decided_at=utc_now(),
            )
        except ValidationError:
            raise ToolUsageError("a reason is at most 4096 characters") from None
        checked_value(decision)  # refused here, before anything is marked as sent
        self._sent[approval_id] = decision
        self._refused.pop(approval_id, None)
        written = False
        try:
            await self.writer.write(decision, record)
            written = True
        finally:
            if not written:  # whatever failed, nothing is on its way
                self._sent.pop(approval_id, None)
        logs.event(
            logs.INFO,
            "decision written",
            approval_id=approval_id,
            approved=approved,
            reviewer=reviewer,
        )

        def landed(view: ApprovalsView) -> bool:
            record = view.get(approval_id)
            return record is not None and record.state is not ApprovalState.PENDING

        if not await self.view.wait_for(landed, wait_s):
            return Outcome(decision, None)
        decided = self.view.get(approval_id)
        assert decided is not None
        if decided.reviewer != reviewer or (decided.state is ApprovalState.DENIED) == approved:
            raise ApprovalConflict(
                f"another decision came first: {decided.state} by {decided.reviewer}",
                approval_id=approval_id,
            )
        return Outcome(decision, decided)

    def resolution_sent(self, approval_id: str) -> Resolution | None:
        """The resolution this process wrote for approval_id and the view does not show yet."""
        resolution = self._resolving.get(approval_id)
        record = self.view.get(approval_id)
        if resolution is None:
            return None
        if record is not None and record.resolved_at == resolution.decided_at:
            self._forget_resolution(approval_id)
            return None
        if record is None:
            self._forget_resolution(approval_id)
            self._refuse(approval_id, "Not resolved: no such approval")
            return None
        before = self._resolved_before.get(approval_id)
        if record.state is not ApprovalState.UNKNOWN or record.resolved_at != before:
            # Another resolution landed first: the worker refuses this one.
            self._forget_resolution(approval_id)
            by = f" by {record.resolved_by}" if record.resolved_by else ""
            self._refuse(
                approval_id,
                f"Not resolved: another resolution came first{by}; approval is {record.state}",
            )
            return None
        return resolution

    def _forget_resolution(self, approval_id: str) -> None:
        self._resolving.pop(approval_id, None)
        self._resolved_before.pop(approval_id, None)

    def check_unknown(self, approval_id: str, resolution: Literal["ran", "not_run"]) -> None:
        """Raise unless a resolution may be written now: the view shows the record unknown,
        no `not_run` was used on it yet, and none sent from here is still on its way."""
        record = self.view.get(approval_id)
        if record is None:
            raise ApprovalNotFound("no such approval", approval_id=approval_id)
        if record.state is not ApprovalState.UNKNOWN:
            raise ApprovalConflict(
                f"approval is {record.state}, not an unknown outcome", approval_id=approval_id
            )
        if resolution == "not_run" and record.resolution == "not_run":
            raise ApprovalConflict(
                "it was already run again once after an unknown outcome", approval_id=approval_id
            )
        if resolution == "not_run":
            check_run_over(record)  # 409 saying from when it is allowed
        sent = self._resolving.get(approval_id)
        if sent is not None and record.resolved_at != sent.decided_at:
            raise ApprovalConflict("a resolution was already sent", approval_id=approval_id)

    async def resolve(
        self,
        approval_id: str,
        *,
        ran: bool,
        reviewer: str,
        result: Any = None,
        reason: str | None = None,
        wait_s: float = LANDED_TIMEOUT_S,
    ) -> Resolved:
        """Write a resolution for an unknown outcome and wait up to wait_s for the table to
        show it. A second one racing from elsewhere is refused by the worker (dead letter)."""
        kind: Literal["ran", "not_run"] = "ran" if ran else "not_run"
        self.check_unknown(approval_id, kind)  # no await between the check and the mark below
        try:
            resolution = Resolution(
                approval_id=approval_id,
                resolution=kind,
                reviewer=reviewer,
                result=result,
                reason=reason or None,
                decided_at=utc_now(),
            )
        except ValidationError:
            raise ToolUsageError("a reason is at most 4096 characters") from None
        checked_value(resolution)  # refused here, before anything is marked as sent
        current = self.view.get(approval_id)
        assert current is not None  # check_unknown found it, and nothing was awaited since
        self._resolved_before[approval_id] = current.resolved_at
        self._resolving[approval_id] = resolution
        self._refused.pop(approval_id, None)
        written = False
        try:
            await self.writer.write(resolution, current)
            written = True
        finally:
            if not written:  # whatever failed, nothing is on its way
                self._forget_resolution(approval_id)
        logs.event(
            logs.INFO,
            "resolution written",
            approval_id=approval_id,
            resolution=kind,
            reviewer=reviewer,
        )

        def landed(view: ApprovalsView) -> bool:
            record = view.get(approval_id)
            return record is not None and record.resolved_at == resolution.decided_at

        if not await self.view.wait_for(landed, wait_s):
            return Resolved(resolution, None)
        self._forget_resolution(approval_id)
        return Resolved(resolution, self.view.get(approval_id))
