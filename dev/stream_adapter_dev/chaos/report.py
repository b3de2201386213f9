"""The chaos run's figures: computed from replies, the ledger and the approvals changelog.

Definitions (docs/chaos.md):
- a call without a terminal reply has no `ok`, `error` or `already_done` reply;
- an approval asked twice is a call with more than one distinct approval_id among its
  `pending_approval` replies, or an approval_id with more than one committed `pending` record;
- an approved call run twice has more than one ledger line for its call_id;
- duplicate replies are replies beyond the first `pending_approval` and the first terminal one;
  the first ten calls that have any are listed with where and when each of their replies was
  written, to trace them;
- per approved tool: a call ended `unknown` when its first terminal reply is `already_done` with
  `outcome: "unknown"`, and normally otherwise; its effects are its ledger lines (an idempotent
  tool must have exactly one per approved call, and no call may have more than one);
- a run cut off by a SIGKILL is a confirm tool's run that the demo's run journal shows started
  in the killed process and not ended; a kill landed on a tool when it cut off at least one of
  its runs; a kill planned while a tool runs found none when it cut off none of that tool's
  runs (or never found one to kill). The calls cut off must end as their tool's rule says: an
  idempotent tool's normally (run again) with one effect, another's `unknown` (no second run),
  and none with two effects.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .load import APPROVED, EXPECTED, CallSpec

TERMINAL = frozenset({"ok", "error", "already_done"})


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """One fault: what, when (seconds into the run), and how long until every partition answered."""

    kind: str
    target: str
    at_s: float
    recover_s: float | None
    gap_s: float | None = None
    """The longest time without any reply between the fault and its recovery."""


@dataclass(frozen=True, slots=True)
class ApprovedTool:
    """What became of one approved tool's calls, and what its ledger shows per call."""

    idempotent: bool
    approved: int
    ended_normally: int
    """With an ok or error reply (or `already_done` carrying that stored outcome)."""
    ended_unknown: int
    effects_none: int
    effects_one: int
    effects_more: int

    @property
    def ok(self) -> bool:
        """An idempotent tool: no call unknown, one effect each; any: never two effects."""
        if self.effects_more:
            return False
        if not self.idempotent:
            return True
        return self.ended_unknown == 0 and self.effects_one == self.approved


def _first_terminal(replies: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    return next((r for r in replies if r.get("status") in TERMINAL), None)


def _is_unknown(reply: Mapping[str, Any]) -> bool:
    return reply["status"] == "already_done" and reply.get("outcome") == "unknown"


def approved_figures(
    calls: Sequence[CallSpec],
    by_call: Mapping[str, list[dict[str, Any]]],
    ledger: Mapping[str, int],
) -> dict[str, ApprovedTool]:
    """Per approved tool (load.APPROVED): its calls' endings and ledger effects."""
    out: dict[str, ApprovedTool] = {}
    for tool, idempotent in APPROVED.items():
        mine = [c for c in calls if c.tool == tool]
        normal = unknown = 0
        for call in mine:
            first = _first_terminal(by_call.get(call.call_id, []))
            if first is None:
                continue
            if _is_unknown(first):
                unknown += 1
            else:
                normal += 1
        effects = Counter(min(ledger.get(c.call_id, 0), 2) for c in mine)
        out[tool] = ApprovedTool(
            idempotent, len(mine), normal, unknown, effects[0], effects[1], effects[2]
        )
    return out


@dataclass(frozen=True, slots=True)
class KilledRun:
    """A confirm tool's run cut off by a SIGKILL of its worker."""

    tool: str
    call_id: str
    effect: bool
    """Its call's effect was in the ledger when the worker had died."""


@dataclass(frozen=True, slots=True)
class WorkerKill:
    """One SIGKILL of a worker: the runs it cut off; a planned kill-while-running names the tool
    it waited for (worker "" when no run of that tool was found to kill)."""

    kind: str
    worker: str
    planned_tool: str | None
    cut: tuple[KilledRun, ...] = ()

    @property
    def found(self) -> bool:
        """A planned kill-while-running cut off a run of its tool (an unplanned kill: True)."""
        return self.planned_tool is None or any(r.tool == self.planned_tool for r in self.cut)


@dataclass(frozen=True, slots=True)
class KilledTool:
    """Per approved tool: the SIGKILLs that landed while its runs were going, and how the calls
    they cut off ended."""

    idempotent: bool
    planned: int
    """Kills planned to wait until one of its runs is going (the kill-while-running fault)."""
    missed: int
    """Of them, kills that found no such run, or cut off none (the run ended first)."""
    kills_landed: int
    """SIGKILLs, planned or not, that cut off at least one of its runs."""
    runs_cut: int
    runs_cut_after_effect: int
    """Of the runs cut off, those whose call's effect was already in the ledger."""
    calls_cut: int
    ended_normally: int
    ended_unknown: int
    effects_none: int
    effects_one: int
    effects_more: int
    """The calls cut off: how they ended, and their ledger effects at the end of the run."""

    @property
    def ok(self) -> bool:
        """No planned kill missed; no call cut off has two effects; an idempotent tool's calls
        cut off all ended normally (run again) with one effect, another tool's all `unknown`
        (a normal ending could only come from a second run)."""
        if self.missed or self.effects_more:
            return False
        if not self.idempotent:
            return self.ended_unknown == self.calls_cut
        return (
            self.ended_unknown == 0
            and self.ended_normally == self.calls_cut
            and self.effects_one == self.calls_cut
        )


def killed_figures(
    kills: Sequence[WorkerKill],
    by_call: Mapping[str, list[dict[str, Any]]],
    ledger: Mapping[str, int],
) -> dict[str, KilledTool]:
    """Per approved tool (load.APPROVED): what the SIGKILLs cut off and how those calls ended."""
    out: dict[str, KilledTool] = {}
    for tool, idempotent in APPROVED.items():
        runs = [r for k in kills for r in k.cut if r.tool == tool]
        planned = [k for k in kills if k.planned_tool == tool]
        calls = sorted({r.call_id for r in runs})
        normal = unknown = 0
        for call_id in calls:
            first = _first_terminal(by_call.get(call_id, []))
            if first is None:
                continue
            if _is_unknown(first):
                unknown += 1
            else:
                normal += 1
        effects = Counter(min(ledger.get(c, 0), 2) for c in calls)
        out[tool] = KilledTool(
            idempotent=idempotent,
            planned=len(planned),
            missed=sum(1 for k in planned if not k.found),
            kills_landed=sum(1 for k in kills if any(r.tool == tool for r in k.cut)),
            runs_cut=len(runs),
            runs_cut_after_effect=sum(1 for r in runs if r.effect),
            calls_cut=len(calls),
            ended_normally=normal,
            ended_unknown=unknown,
            effects_none=effects[0],
            effects_one=effects[1],
            effects_more=effects[2],
        )
    return out


@dataclass(frozen=True, slots=True)
class ReplyCopy:
    """One reply of a call as the reader found it: its place in the replies topic and its
    record timestamp in seconds from the run's start."""

    status: str
    partition: int
    offset: int
    at_s: float


@dataclass(frozen=True, slots=True)
class DuplicateExample:
    """A call answered more than once, with every reply it got, in the order read."""

    call_id: str
    tool: str
    replies: list[ReplyCopy]


def duplicate_examples(
    calls: Sequence[CallSpec],
    by_call: Mapping[str, list[dict[str, Any]]],
    places: Mapping[str, list[tuple[int, int, int]]],
    start_ms: int,
    *,
    limit: int = 10,
) -> list[DuplicateExample]:
    """The first `limit` calls with a duplicate reply. `places` holds (partition, offset,
    timestamp ms) of each reply in `by_call`, index for index."""
    out = []
    for call in calls:
        replies = by_call.get(call.call_id, [])
        statuses = [str(r.get("status")) for r in replies]
        terminal = sum(1 for s in statuses if s in TERMINAL)
        if terminal < 2 and statuses.count("pending_approval") < 2:
            continue
        copies = [
            ReplyCopy(status, partition, offset, round((ts - start_ms) / 1000, 3))
            for status, (partition, offset, ts) in zip(
                statuses, places.get(call.call_id, []), strict=False
            )
        ]
        out.append(DuplicateExample(call.call_id, call.tool, copies))
        if len(out) == limit:
            break
    return out


@dataclass(slots=True)
class ChaosFigures:
    """What a chaos run reports; `passed` is the acceptance verdict."""

    guarantee: str
    reader: str
    broker: str
    calls: int
    duration_s: float
    calls_without_terminal_reply: int
    approvals_asked_twice: int
    approved_runs_twice: int
    approved_outcome_unknown: int
    duplicate_replies: int
    duplicate_pending_replies: int
    duplicate_terminal_replies: int
    unexpected_outcomes: int
    final_lag: int
    worker_kills: int
    unplanned_worker_exits: int
    producer_resends: int
    calls_in_the_dark: int = 0
    """Approved calls with no final reply whose record is not `unknown` either (`in_the_dark`)."""
    worker_pauses: int = 0
    """Workers SIGSTOPped past the session timeout, then SIGCONTed."""
    worker_partitions: int = 0
    """Workers cut off from the broker (alive) past the session timeout, then reconnected."""
    table_disagreements: int = 0
    """Records on which an approvals partition's owner's store and the changelog disagree at
    the end (tables.py)."""
    runs_by_non_owner: int = 0
    """Approved runs started by a process that did not own their call's partition then
    (ownership.py)."""
    runs_after_own_revocation: int = 0
    """Approved runs a process started on a partition it had revoked in a rebalance, before
    its next assignment (reported; not yet part of the verdict)."""
    revoked_examples: list[str] = field(default_factory=list)
    disagreement_examples: list[str] = field(default_factory=list)
    non_owner_examples: list[str] = field(default_factory=list)
    longest_reply_gap_s: float = 0.0
    """The longest time without any reply while calls were outstanding: the outage seen."""
    faults: list[FaultRecord] = field(default_factory=list)
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    missing_examples: list[str] = field(default_factory=list)
    duplicate_examples: list[DuplicateExample] = field(default_factory=list)
    approved: dict[str, ApprovedTool] = field(default_factory=dict)
    """Per approved tool: how its calls ended and the ledger's effects per call."""
    killed: dict[str, KilledTool] = field(default_factory=dict)
    """Per approved tool: the SIGKILLs that landed while its runs were going."""
    kills: list[WorkerKill] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (
            self.calls_without_terminal_reply == 0
            and self.approvals_asked_twice == 0
            and self.approved_runs_twice == 0
            and self.calls_in_the_dark == 0
            and self.table_disagreements == 0
            and self.runs_by_non_owner == 0
            and all(tool.ok for tool in self.approved.values())
            and all(tool.ok for tool in self.killed.values())
            and self.final_lag == 0
            and self.unexpected_outcomes == 0
            and all(f.recover_s is not None for f in self.faults)
            and (self.guarantee != "exactly_once" or self.duplicate_replies == 0)
        )

    @property
    def idempotent_unknown(self) -> int:
        """Approved calls of idempotent tools that ended `unknown` (must be none)."""
        return sum(t.ended_unknown for t in self.approved.values() if t.idempotent)

    @property
    def planned_running_kills_missed(self) -> int:
        """Kills planned while an approved tool runs that cut off none of its runs."""
        return sum(t.missed for t in self.killed.values())

    def to_json(self) -> dict[str, Any]:
        approved = {name: {**asdict(t), "ok": t.ok} for name, t in self.approved.items()}
        killed = {name: {**asdict(t), "ok": t.ok} for name, t in self.killed.items()}
        kills = [{**asdict(k), "found": k.found} for k in self.kills]
        return {
            **asdict(self),
            "approved": approved,
            "killed": killed,
            "kills": kills,
            "passed": self.passed,
        }


def longest_gap(arrivals: Sequence[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without an arrival (arrivals sorted, in seconds)."""
    last = start
    longest = 0.0
    for t in arrivals:
        if t <= start:
            continue
        if t >= end:
            break
        longest = max(longest, t - last)
        last = t
    return max(longest, end - last)


def ledger_counts(path: Path) -> Counter[str]:
    """Ledger lines per call_id: one per run of wire_funds, one per call of send_invoice."""
    if not path.exists():
        return Counter()
    return Counter(json.loads(line)["call_id"] for line in path.read_text().splitlines() if line)


def in_the_dark(changelog: Iterable[Any], by_call: Mapping[str, list[dict[str, Any]]]) -> list[str]:
    """Approved calls left in the dark: their agent has no final reply (none, or only an
    `unknown` answer) and their record is not `unknown` at the end, so no person is asked
    either (a run's `done` written by a worker that no longer owned its partition, say)."""
    last: dict[bytes, dict[str, Any]] = {}
    for message in changelog:
        if message.value is None:
            last.pop(message.key, None)
        else:
            last[message.key] = json.loads(message.value)
    dark = []
    for record in last.values():
        if not record.get("runs"):
            continue  # never started: pending, denied, expired
        replies = by_call.get(record["call_id"], [])
        final = any(r.get("status") in TERMINAL and not _is_unknown(r) for r in replies)
        if not final and record.get("state") != "unknown":
            dark.append(record["call_id"])
    return dark


def pending_records(changelog: Iterable[Any]) -> Counter[str]:
    """Committed `pending` writes per approval_id in the approvals changelog."""
    out: Counter[str] = Counter()
    for message in changelog:
        if message.value is None:
            continue
        record = json.loads(message.value)
        if record.get("state") == "pending":
            out[record["approval_id"]] += 1
    return out


@dataclass(frozen=True, slots=True)
class ReplyFigures:
    """What the replies alone say about the calls."""

    without_terminal: list[str]
    asked_twice: set[str]
    unknown_outcome: int
    duplicate_pending: int
    duplicate_terminal: int
    unexpected: int
    outcomes: dict[str, dict[str, int]]


def reply_figures(
    calls: Sequence[CallSpec], by_call: Mapping[str, list[dict[str, Any]]]
) -> ReplyFigures:
    without, asked_twice = [], set()
    unknown = dup_pending = dup_terminal = unexpected = 0
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    for call in calls:
        replies = by_call.get(call.call_id, [])
        pending = [r for r in replies if r.get("status") == "pending_approval"]
        terminal = [r for r in replies if r.get("status") in TERMINAL]
        dup_pending += max(0, len(pending) - 1)
        dup_terminal += max(0, len(terminal) - 1)
        if len({r.get("approval_id") for r in pending}) > 1:
            asked_twice.add(call.call_id)
        if not terminal:
            without.append(call.call_id)
            outcomes[call.tool]["(none)"] += 1
            continue
        first = terminal[0]
        status = str(first["status"])
        if status == "already_done" and first.get("outcome") == "unknown":
            unknown += 1
            status = "already_done (unknown)"
        elif status == "already_done":  # the reply was lost; the stored outcome stands in
            outcome = first.get("outcome")
            inner = outcome.get("status") if isinstance(outcome, dict) else outcome
            status = f"already_done ({inner})"
            unexpected += inner != EXPECTED[call.tool]
        elif status != EXPECTED[call.tool]:
            unexpected += 1
        outcomes[call.tool][status] += 1
    return ReplyFigures(
        without,
        asked_twice,
        unknown,
        dup_pending,
        dup_terminal,
        unexpected,
        {tool: dict(counts) for tool, counts in sorted(outcomes.items())},
    )


def render(figures: ChaosFigures, console: Console) -> None:
    """The run's figures and its faults as two tables."""
    verdict = "[green]PASS[/green]" if figures.passed else "[red]FAIL[/red]"
    table = Table("figure", "value", title=f"chaos run, {figures.guarantee}: {verdict}")
    rows: list[tuple[str, object]] = [
        ("calls", figures.calls),
        ("duration (s)", f"{figures.duration_s:.1f}"),
        ("broker", figures.broker),
        ("replies read", figures.reader),
        ("calls without a terminal reply", figures.calls_without_terminal_reply),
        ("approvals asked twice", figures.approvals_asked_twice),
        ("approved calls run more than once", figures.approved_runs_twice),
        ("approved calls in the dark (no final reply, not unknown)", figures.calls_in_the_dark),
        ("table/changelog disagreements at the end", figures.table_disagreements),
        ("approved runs started by a non-owner", figures.runs_by_non_owner),
        (
            "approved runs started after the worker's own revocation",
            figures.runs_after_own_revocation,
        ),
        ("approved calls with outcome unknown (killed mid-run)", figures.approved_outcome_unknown),
        ("duplicate replies", figures.duplicate_replies),
        ("  of them pending_approval", figures.duplicate_pending_replies),
        ("  of them terminal", figures.duplicate_terminal_replies),
        ("unexpected outcomes", figures.unexpected_outcomes),
        ("final consumer lag", figures.final_lag),
        ("longest time without a reply (s)", f"{figures.longest_reply_gap_s:.1f}"),
        ("worker SIGKILLs", figures.worker_kills),
        ("worker pauses (SIGSTOP past the session timeout)", figures.worker_pauses),
        ("worker partitions (cut off past the session timeout)", figures.worker_partitions),
        ("unplanned worker exits", figures.unplanned_worker_exits),
        ("producer resends", figures.producer_resends),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    for tool, counts in figures.outcomes.items():
        table.add_row(f"outcomes: {tool}", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for name, ran in figures.approved.items():
        kind = "idempotent" if ran.idempotent else "not idempotent"
        mark = "" if ran.ok else " [red]FAIL[/red]"
        table.add_row(
            f"approved: {name} ({kind}){mark}",
            f"{ran.approved} approved; {ran.ended_normally} ended with a normal reply, "
            f"{ran.ended_unknown} unknown; ledger effects per call: {ran.effects_one} one, "
            f"{ran.effects_none} none, {ran.effects_more} more than one",
        )
    for name, cut in figures.killed.items():
        mark = "" if cut.ok else " [red]FAIL[/red]"
        table.add_row(
            f"killed while running: {name}{mark}",
            f"{cut.planned} planned kill(s) while it ran, {cut.missed} found none; "
            f"{cut.kills_landed} SIGKILL(s) cut off {cut.runs_cut} run(s) "
            f"({cut.runs_cut_after_effect} after the effect); of those {cut.calls_cut} call(s) "
            f"{cut.ended_normally} ended normally, {cut.ended_unknown} unknown; ledger effects: "
            f"{cut.effects_one} one, {cut.effects_none} none, {cut.effects_more} more than one",
        )
    console.print(table)
    faults = Table("fault", "target", "at (s)", "recovered after (s)", "longest gap (s)")
    for fault in figures.faults:
        recovered = "NOT RECOVERED" if fault.recover_s is None else f"{fault.recover_s:.1f}"
        gap = "-" if fault.gap_s is None else f"{fault.gap_s:.1f}"
        faults.add_row(fault.kind, fault.target, f"{fault.at_s:.1f}", recovered, gap)
    console.print(faults)
    if figures.disagreement_examples:
        console.print(f"disagreements: {', '.join(figures.disagreement_examples)}")
    if figures.revoked_examples:
        console.print(
            f"runs after their worker's revocation: {', '.join(figures.revoked_examples)}"
        )
    if figures.non_owner_examples:
        console.print(f"runs by a non-owner: {', '.join(figures.non_owner_examples)}")
    if figures.duplicate_examples:
        copies = Table("call answered twice", "tool", "replies: status, partition/offset, at (s)")
        for example in figures.duplicate_examples:
            where = "; ".join(
                f"{c.status} {c.partition}/{c.offset} {c.at_s:.3f}" for c in example.replies
            )
            copies.add_row(example.call_id, example.tool, where)
        console.print(copies)


def render_figures(figures: Any, console: Console, title: str, *, sep: str = ", ") -> None:
    """A fuzz run's figures as a table titled with its verdict, then its examples: figures has
    `passed`, `examples` (name to example texts) and `to_json()`."""
    verdict = "[green]PASS[/green]" if figures.passed else "[red]FAIL[/red]"
    table = Table("figure", "value", title=f"{title}: {verdict}")
    for name, value in figures.to_json().items():
        if name not in ("examples", "passed"):
            table.add_row(name.replace("_", " "), str(value))
    console.print(table)
    for name, examples in figures.examples.items():
        if examples:
            console.print(f"{name}: {sep.join(examples)}")
