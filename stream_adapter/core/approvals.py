"""Approval records, decisions and their pure state transitions (contract §7).

``pending → approved → running → done`` or ``pending → denied``, or ``pending → expired`` when
nobody decides in time (`PENDING_EXPIRY_S`). A run that ended with no
outcome and may not run again goes ``running → unknown``, until a person resolves it: ``unknown →
done`` ("it ran") or, once, ``unknown → approved`` ("it did not run": a fresh run). Settled
records (done, denied, expired) are removed once their retention is over (`retention_due`).
The functions here do no I/O, so the approval stores and the Kafka table apply exactly the same
rules.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import socket
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from stream_adapter.core import logs
from stream_adapter.core._json import JSONError, loads
from stream_adapter.core.envelope import Envelope
from stream_adapter.core.errors import (
    ApprovalConflict,
    ApprovalDenied,
    ApprovalExpired,
    ToolUsageError,
)
from stream_adapter.core.ids import approval_id_for
from stream_adapter.core.replies import (
    Reply,
    already_done_reply,
    error_reply_body,
    ok_reply,
    pending_reply,
)
from stream_adapter.core.retention import DEFAULT_SETTLED_RETENTION_S

__all__ = [
    "DEFAULT_SETTLED_RETENTION_S",
    "MAX_DECISION_BYTES",
    "MAX_RUNS",
    "SETTLED_STATES",
    "ApprovalRecord",
    "ApprovalState",
    "ApprovalStore",
    "Decision",
    "Resolution",
    "Step",
    "apply_decision",
    "apply_resolution",
    "begin_run",
    "check_run_over",
    "denial",
    "expire",
    "expiry",
    "expiry_due",
    "fingerprint",
    "finish",
    "give_up",
    "instant",
    "log_expired",
    "new_record",
    "next_step",
    "parse_decision",
    "parse_reviewer_message",
    "rerun",
    "retention_due",
    "run_age_s",
    "run_limit_s",
    "same_call",
    "same_resolution",
    "settled_at",
    "settled_reply",
    "this_process",
    "utc_now",
]

MAX_DECISION_BYTES = 64 * 1024

MAX_RUNS = 5
"""How many times an approved call of an idempotent tool may be started in all. A call whose
runs keep dying with the worker stops being retried and becomes `unknown` for a person to
resolve, so it cannot hold a worker in a crash loop. A run whose worker lost the partition
meanwhile (a pause, a network partition) counts too, its outcome discarded: five leaves room
for those beside a crash or two."""


class ApprovalState(StrEnum):
    """Where an approval is in its life."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    RUNNING = "running"
    DONE = "done"
    UNKNOWN = "unknown"
    """Its run ended with no outcome and it will not be run again automatically: a person
    finds out whether it ran and resolves it (`Resolution`)."""
    EXPIRED = "expired"
    """Nobody decided it within the pending expiry: its agent got an ApprovalExpired error
    and it never runs."""


SETTLED_STATES = frozenset({ApprovalState.DONE, ApprovalState.DENIED, ApprovalState.EXPIRED})
"""States a record never leaves: kept for the settled retention (redeliveries answer from
them), then removed. A resolved unknown outcome (`ran`) is done, so settled too; pending,
approved, running and unknown records are never removed."""


def utc_now() -> str:
    """The current time as an ISO 8601 UTC string, the form records store."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def instant(text: str) -> datetime | None:
    """An ISO 8601 time as an aware datetime (naive ones taken as UTC); None if unreadable."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _readable_time(text: str) -> str:
    if instant(text) is None:
        raise ValueError("not an ISO 8601 time")
    return text


IsoTime = Annotated[str, AfterValidator(_readable_time)]
"""A time field kept as the string it came as, refused unless `instant` reads it."""


class ApprovalRecord(BaseModel):
    """One parked call and what became of it; the value in `tool-approvals`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    approval_id: str
    tool: str
    arguments: dict[str, Any]
    run_id: str
    call_id: str
    source: str = ""
    message_id: str = ""
    scope: str | None = None
    """The Kafka topic id of the topic the call came from (its incarnation), when known: a
    calls topic created again after the record shows as another id (`topics describe`)."""
    agent_key: str | None = None
    """The Kafka key the call arrived with (undecodable bytes backslash-escaped), if any."""
    origin: str
    state: ApprovalState = ApprovalState.PENDING
    requested_at: str
    reviewer: str | None = None
    decided_at: str | None = None
    reason: str | None = None
    reply: dict[str, Any] | None = None
    runs: int = 0
    """How many times the call was started (approved → running counts one)."""
    started_at: str | None = None
    """When the last run started: a host reruns an idempotent call only once that run is
    surely over (see `next_step`)."""
    started_by: str | None = None
    """Which worker or host started the last run (host name and process id)."""
    run_deadline: str | None = None
    """When the last run is surely over: its start plus the longest it may take (its tool's
    timeout, or MAX_RUN_S for a tool without one, times its attempts, with their backoffs).
    Until then "it did not run" is refused (`apply_resolution`): the run may still act."""
    unknown_at: str | None = None
    """When its run was found over with no outcome (state unknown)."""
    resolution: Literal["ran", "not_run"] | None = None
    """A person's finding about a run with no outcome (see `Resolution`)."""
    resolved_by: str | None = None
    resolved_at: str | None = None
    resolution_reason: str | None = None
    settled_at: str | None = None
    """When it reached a settled state (done, denied, expired): its retention counts from
    here (`retention_due`)."""

    def to_bytes(self) -> bytes:
        """JSON bytes for a table, a changelog or a database row."""
        return self.model_dump_json(exclude_none=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes | str) -> ApprovalRecord:
        """Parse bytes written by to_bytes; ToolUsageError when they are not a record."""
        try:
            return cls.model_validate_json(data)
        except ValidationError:
            raise ToolUsageError("not an approval record") from None


class Decision(BaseModel):
    """A reviewer's verdict, the value on `approval-decisions`."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    approval_id: str = Field(min_length=1, max_length=256)
    approved: bool
    reviewer: str = Field(min_length=1, max_length=256)
    reason: str | None = Field(default=None, max_length=4096)
    decided_at: IsoTime | None = None


class Resolution(BaseModel):
    """A reviewer's finding about an approved call whose run left no outcome (state unknown),
    sent on `approval-decisions` like a decision: `ran` settles it with an ok reply carrying
    `result`; `not_run` approves one fresh run."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    approval_id: str = Field(min_length=1, max_length=256)
    resolution: Literal["ran", "not_run"]
    reviewer: str = Field(min_length=1, max_length=256)
    result: Any = None
    reason: str | None = Field(default=None, max_length=4096)
    decided_at: IsoTime | None = None


def _message(value: bytes | str | Mapping[str, Any]) -> Any:
    return value if isinstance(value, Mapping) else loads(value, MAX_DECISION_BYTES)


def parse_decision(value: bytes | str | Mapping[str, Any]) -> Decision:
    """Strictly parse a decision; ToolUsageError on any other key, type or shape."""
    try:
        return Decision.model_validate(_message(value))
    except (JSONError, ValidationError):
        raise ToolUsageError("malformed decision") from None


def parse_reviewer_message(value: bytes | str | Mapping[str, Any]) -> Decision | Resolution:
    """A decision, or a resolution when it has a `resolution` key; each parsed strictly."""
    try:
        obj = _message(value)
        if isinstance(obj, Mapping) and "resolution" in obj:
            return Resolution.model_validate(obj)
        return Decision.model_validate(obj)
    except (JSONError, ValidationError):
        raise ToolUsageError("malformed decision") from None


def new_record(
    envelope: Envelope,
    tool: str,
    *,
    origin: str,
    now: str | None = None,
    agent_key: bytes | None = None,
    scope: str | None = None,
) -> ApprovalRecord:
    """The pending record for a confirm call; its id is derived from the call's ids and
    source."""
    return ApprovalRecord(
        approval_id=approval_id_for(envelope.run_id, envelope.call_id, envelope.source),
        tool=tool,
        arguments=dict(envelope.arguments),
        run_id=envelope.run_id,
        call_id=envelope.call_id,
        source=envelope.source,
        message_id=envelope.message_id,
        scope=scope or None,
        agent_key=None if agent_key is None else agent_key.decode("utf-8", "backslashreplace"),
        origin=origin,
        requested_at=now or utc_now(),
    )


def _canonical(arguments: Mapping[str, Any]) -> bytes:
    """arguments as canonical JSON: 1, 1.0 and true differ, as they do to a tool."""
    return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)


def same_call(record: ApprovalRecord, tool: str, arguments: Mapping[str, Any], source: str) -> bool:
    """Whether a call of tool with arguments from source is record's call: the same ids with
    anything else is someone else's call, never answered from record."""
    return (
        record.tool == tool
        and record.source == source
        and _canonical(record.arguments) == _canonical(arguments)
    )


def fingerprint(record: ApprovalRecord) -> str:
    """What a signed decision is bound to: the record's id, when and from which message it was
    requested, its tool and arguments. A decision signed for one call never applies to another
    call parked later under the same ids."""
    h = hashlib.sha256()
    texts = (record.approval_id, record.requested_at, record.message_id, record.tool)
    for part in (
        *(t.encode("utf-8", "surrogatepass") for t in texts),
        _canonical(record.arguments),
    ):
        h.update(b"%d:" % len(part))
        h.update(part)
    return h.hexdigest()


def apply_decision(
    record: ApprovalRecord, decision: Decision, *, now: str | None = None
) -> tuple[ApprovalRecord, bool]:
    """Record the first decision on a pending record; any other state stays as it is."""
    if decision.approval_id != record.approval_id:
        raise ToolUsageError("decision is for another approval")
    if record.state is not ApprovalState.PENDING:
        return record, False
    state = ApprovalState.APPROVED if decision.approved else ApprovalState.DENIED
    at = now or utc_now()
    update: dict[str, Any] = {
        "state": state,
        "reviewer": decision.reviewer,
        "decided_at": decision.decided_at or at,
        "reason": decision.reason,
    }
    if state is ApprovalState.DENIED:
        update["settled_at"] = at
    return record.model_copy(update=update), True


def this_process() -> str:
    """Who starts a run here: host name and process id (kept as the record's `started_by`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _run_start(by: str | None, limit_s: float | None) -> dict[str, Any]:
    """started_at, started_by and (given the run's longest duration) run_deadline."""
    started = datetime.now(UTC)
    deadline = None if limit_s is None else _iso(started + timedelta(seconds=limit_s))
    return {
        "started_at": _iso(started),
        "started_by": by or this_process(),
        "run_deadline": deadline,
    }


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_limit_s(
    timeout_s: float | None, max_run_s: float, *, attempts: int = 1, backoff_cap_s: float = 0.0
) -> float:
    """The longest a run may take: attempts of the tool's timeout (max_run_s for a tool
    without one) with a capped backoff between each two."""
    per_attempt = timeout_s if timeout_s is not None else max_run_s
    return attempts * per_attempt + (attempts - 1) * backoff_cap_s


def begin_run(
    record: ApprovalRecord, *, by: str | None = None, limit_s: float | None = None
) -> ApprovalRecord:
    """approved → running; ApprovalConflict from any other state (the decision is used).
    limit_s: the longest the run may take (`run_limit_s`), kept as its `run_deadline`."""
    if record.state is not ApprovalState.APPROVED:
        raise ApprovalConflict(
            f"approval is {record.state}, not approved", approval_id=record.approval_id
        )
    return record.model_copy(
        update={"state": ApprovalState.RUNNING, "runs": record.runs + 1} | _run_start(by, limit_s)
    )


def rerun(
    record: ApprovalRecord, *, by: str | None = None, limit_s: float | None = None
) -> ApprovalRecord:
    """running → running once more, for an idempotent tool whose earlier run left no outcome."""
    if record.state is not ApprovalState.RUNNING or record.runs >= MAX_RUNS:
        raise ApprovalConflict(
            f"approval is {record.state} after {record.runs} runs, not to be run again",
            approval_id=record.approval_id,
        )
    return record.model_copy(update={"runs": record.runs + 1} | _run_start(by, limit_s))


def give_up(record: ApprovalRecord, *, now: str | None = None) -> ApprovalRecord:
    """running → unknown: its run is over with no outcome and it may not run again."""
    if record.state is not ApprovalState.RUNNING:
        raise ApprovalConflict(
            f"approval is {record.state}, not running", approval_id=record.approval_id
        )
    return record.model_copy(
        update={"state": ApprovalState.UNKNOWN, "unknown_at": now or utc_now()}
    )


def apply_resolution(
    record: ApprovalRecord, resolution: Resolution, *, now: str | None = None
) -> ApprovalRecord:
    """unknown → done (`ran`, with an ok reply marked `resolved_by`) or unknown → approved
    (`not_run`, once per approval); ApprovalConflict from any other state or a second
    `not_run`."""
    if resolution.approval_id != record.approval_id:
        raise ToolUsageError("resolution is for another approval")
    if record.state is not ApprovalState.UNKNOWN:
        raise ApprovalConflict(
            f"approval is {record.state}, not unknown", approval_id=record.approval_id
        )
    if resolution.resolution == "not_run" and record.resolution == "not_run":
        raise ApprovalConflict(
            "approval was already run again once after an unknown outcome",
            approval_id=record.approval_id,
        )
    if resolution.resolution == "not_run":
        check_run_over(record, None if now is None else instant(now))
    update: dict[str, Any] = {
        "resolution": resolution.resolution,
        "resolved_by": resolution.reviewer,
        "resolved_at": resolution.decided_at or now or utc_now(),
        "resolution_reason": resolution.reason,
    }
    if resolution.resolution == "ran":
        reply = ok_reply(
            record.tool, record.run_id, record.call_id, resolution.result, record.approval_id
        )
        reply["resolved_by"] = resolution.reviewer
        update |= {"state": ApprovalState.DONE, "reply": reply, "settled_at": now or utc_now()}
    else:
        update |= {"state": ApprovalState.APPROVED, "unknown_at": None}
    return record.model_copy(update=update)


def check_run_over(record: ApprovalRecord, now: datetime | None = None) -> None:
    """ApprovalConflict while record's last run may still be going (before its
    `run_deadline`): "it did not run" is not known yet, and a second run could join it."""
    deadline = None if record.run_deadline is None else instant(record.run_deadline)
    if deadline is not None and (now or datetime.now(UTC)) < deadline:
        raise ApprovalConflict(
            "its last run may still be going: 'it did not run' is allowed from "
            f"{record.run_deadline}",
            approval_id=record.approval_id,
        )


def same_resolution(record: ApprovalRecord, resolution: Resolution) -> bool:
    """Whether record already holds exactly this (timestamped) resolution: a redelivery."""
    return (
        resolution.decided_at is not None
        and record.resolution == resolution.resolution
        and record.resolved_by == resolution.reviewer
        and record.resolved_at == resolution.decided_at
    )


def run_age_s(record: ApprovalRecord, now: datetime | None = None) -> float:
    """Seconds since record's last run started (infinite when it does not say)."""
    started = None if record.started_at is None else instant(record.started_at)
    if started is None:
        return float("inf")
    return ((now or datetime.now(UTC)) - started).total_seconds()


def finish(record: ApprovalRecord, reply: Reply, *, now: str | None = None) -> ApprovalRecord:
    """running → done, keeping the terminal reply for redelivered resumes."""
    if record.state is not ApprovalState.RUNNING:
        raise ApprovalConflict(
            f"approval is {record.state}, not running", approval_id=record.approval_id
        )
    return record.model_copy(
        update={"state": ApprovalState.DONE, "reply": dict(reply), "settled_at": now or utc_now()}
    )


def settled_at(record: ApprovalRecord) -> datetime | None:
    """When record settled; None while it is not settled. A record written before
    `settled_at` was kept counts from its latest known time."""
    if record.state not in SETTLED_STATES:
        return None
    if record.settled_at is not None:
        return instant(record.settled_at)
    known = (record.resolved_at, record.started_at, record.decided_at, record.requested_at)
    times = [t for t in (instant(x) for x in known if x) if t is not None]
    return max(times) if times else None


def retention_due(
    record: ApprovalRecord, retention_s: float | None, now: datetime | None = None
) -> bool:
    """Whether record is settled and its retention (seconds; None: kept for ever) is over."""
    if retention_s is None:
        return False
    settled = settled_at(record)
    if settled is None:
        return False
    return ((now or datetime.now(UTC)) - settled).total_seconds() >= retention_s


def expiry_due(record: ApprovalRecord, expiry_s: float | None, now: datetime | None = None) -> bool:
    """Whether record is pending and nobody decided it within expiry_s (None: never expires)."""
    if expiry_s is None or record.state is not ApprovalState.PENDING:
        return False
    requested = instant(record.requested_at)
    if requested is None:
        return False
    return ((now or datetime.now(UTC)) - requested).total_seconds() >= expiry_s


def expiry(record: ApprovalRecord) -> ApprovalExpired:
    """The ApprovalExpired error an expired record answers with."""
    return ApprovalExpired(
        f"approval {record.approval_id} expired: nobody decided it in time",
        tool=record.tool,
        run_id=record.run_id,
        call_id=record.call_id,
        approval_id=record.approval_id,
    )


def expire(record: ApprovalRecord, *, now: str | None = None) -> ApprovalRecord:
    """pending → expired, keeping the error reply its agent gets (and redeliveries get again)."""
    if record.state is not ApprovalState.PENDING:
        raise ApprovalConflict(
            f"approval is {record.state}, not pending", approval_id=record.approval_id
        )
    reply = error_reply_body(
        expiry(record),
        tool=record.tool,
        run_id=record.run_id,
        call_id=record.call_id,
        approval_id=record.approval_id,
    )
    return record.model_copy(
        update={"state": ApprovalState.EXPIRED, "reply": reply, "settled_at": now or utc_now()}
    )


def log_expired(record: ApprovalRecord) -> None:
    """Log that record expired, once its expired state is stored."""
    logs.event(
        logs.INFO,
        "approval expired; nobody decided it in time",
        tool=record.tool,
        run_id=record.run_id,
        call_id=record.call_id,
        approval_id=record.approval_id,
    )


class Step(StrEnum):
    """What a resume (or a decision's follow-up) does for a record in a given state."""

    WAIT = "wait"  # pending: reply pending_approval again
    RUN = "run"  # approved: claim it and run the call once
    RERUN = "rerun"  # running, idempotent tool: its run left no outcome; run it again
    BUSY = "busy"  # running, idempotent tool, maybe still running elsewhere: try again later
    DENY = "deny"  # denied: ApprovalDenied
    EXPIRED = "expired"  # expired: ApprovalExpired
    DONE = "done"  # running, unknown or done: reply already_done
    GIVE_UP = "give_up"  # running, over with no outcome, not to run again: mark it unknown


_STEPS = {
    ApprovalState.PENDING: Step.WAIT,
    ApprovalState.APPROVED: Step.RUN,
    ApprovalState.DENIED: Step.DENY,
    ApprovalState.RUNNING: Step.DONE,
    ApprovalState.DONE: Step.DONE,
    ApprovalState.UNKNOWN: Step.DONE,
    ApprovalState.EXPIRED: Step.EXPIRED,
}


def next_step(
    record: ApprovalRecord, *, idempotent: bool = False, rerun_after_s: float = 0.0
) -> Step:
    """The step for record's state.

    A `running` record met again means a run with no outcome yet: over if its worker or host
    died, or still going elsewhere. A non-idempotent call stays at most once (`already_done`,
    outcome unknown). An idempotent one runs again with the same call_id, up to MAX_RUNS
    starts in all, once its last run started `rerun_after_s` ago (`Step.BUSY` before then):
    the worker knows which runs are its own and live, so it passes 0; a host cannot, so it
    waits until the last run is surely past its timeout. A run that is surely over and may
    not run again is given up (`Step.GIVE_UP`: running → unknown, for a person to resolve);
    before then a non-idempotent call answers `already_done` with outcome unknown.
    """
    if record.state is ApprovalState.RUNNING:
        over = run_age_s(record) >= rerun_after_s
        if idempotent and record.runs < MAX_RUNS:
            return Step.RERUN if over else Step.BUSY
        return Step.GIVE_UP if over else Step.DONE
    return _STEPS[record.state]


def settled_reply(record: ApprovalRecord) -> Reply:
    """pending_approval for a pending record, already_done (with outcome) once used."""
    step = _STEPS[record.state]
    if step is Step.WAIT:
        return pending_reply(record.tool, record.run_id, record.call_id, record.approval_id)
    if step is Step.DONE:
        outcome: Reply | Literal["unknown"] = record.reply if record.reply else "unknown"
        return already_done_reply(
            record.tool, record.run_id, record.call_id, record.approval_id, outcome
        )
    raise ValueError(f"an approval in state {record.state} has no settled reply")


def denial(record: ApprovalRecord) -> ApprovalDenied:
    """The ApprovalDenied error for a denied record (the reason stays out of it)."""
    return ApprovalDenied(
        f"approval {record.approval_id} was denied",
        tool=record.tool,
        run_id=record.run_id,
        call_id=record.call_id,
        approval_id=record.approval_id,
    )


@runtime_checkable
class ApprovalStore(Protocol):
    """Where hosts without Kafka tables park calls and keep decisions (async, atomic)."""

    async def park(self, record: ApprovalRecord) -> ApprovalRecord:
        """Insert record unless its approval_id exists; return the stored one."""
        ...

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        """The record, or None."""
        ...

    async def decide(self, approval_id: str, decision: Decision) -> ApprovalRecord:
        """Apply a decision to a pending record; ApprovalNotFound, or ApprovalConflict."""
        ...

    async def claim(self, approval_id: str) -> tuple[ApprovalRecord, bool]:
        """Atomically approved → running; True for exactly one caller, who runs the call."""
        ...

    async def finish(self, approval_id: str, reply: Reply) -> ApprovalRecord:
        """running → done with the terminal reply."""
        ...

    async def reclaim(
        self, approval_id: str, *, rerun_after_s: float = 0.0
    ) -> tuple[ApprovalRecord, bool]:
        """running → running with one more run (`rerun`) when `next_step` says RERUN for an
        idempotent tool; True when the caller may run the call again."""
        ...

    async def give_up(
        self, approval_id: str, *, idempotent: bool, rerun_after_s: float
    ) -> tuple[ApprovalRecord, bool]:
        """running → unknown (`give_up`) when `next_step` says GIVE_UP; True when it moved."""
        ...

    async def resolve(self, approval_id: str, resolution: Resolution) -> ApprovalRecord:
        """Apply a person's resolution to an unknown record (`apply_resolution`);
        ApprovalNotFound, or ApprovalConflict."""
        ...

    async def list(self, state: ApprovalState | None = None) -> builtins.list[ApprovalRecord]:
        """Records, optionally only those in state, oldest first."""
        ...
