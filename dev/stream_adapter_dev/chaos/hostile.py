"""The hostile fuzz run (`stream-adapter fuzz --hostile`): what a careless or compromised agent
may produce, at one worker, at either guarantee.

- sizes at and around every limit: confirm and plain calls of 1 KB to MAX_ENVELOPE_BYTES + 1 KiB
  (up to the cap: answered; above it: a ToolUsageError), the confirm ones then approved (their
  outcome, or a small RecordTooLarge when it cannot be stored next to the arguments);
- reused ids with other arguments: the second call must get a ToolUsageError;
- re-keyed decisions (a signed approval under another approval's key) and replayed ones (the
  same signed approval again): neither may change a record or run anything again;
- floods of identical calls: each gets exactly one answer.

After each hostile message an `echo` probe follows on the same key: a probe left without its
`ok` is a stalled partition. The run passes when every counter is 0.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from stream_adapter.core.envelope import MAX_ENVELOPE_BYTES
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.kafka.partitions import partition_for
from stream_adapter.review.view import ApprovalsView
from stream_adapter.settings import Settings

from .cluster_faults import ClusterControl
from .environment import create_run_topics, run_settings
from .harness import BrokerControl, WorkerPool
from .load import CallSender, producer_for, wait_for_record
from .observe import ReplyReader, settle_lag
from .report import ledger_counts, render_figures

HOSTILE_KEYS = "hostile-1:hostile-secret-one-long-enough-for-the-check"
PARTITIONS = 4
LIMIT_SIZES = (
    1_000,
    400_000,
    693_000,
    MAX_ENVELOPE_BYTES - 1024,
    MAX_ENVELOPE_BYTES - 1,
    MAX_ENVELOPE_BYTES,
    MAX_ENVELOPE_BYTES + 1,
    MAX_ENVELOPE_BYTES + 1024,
)
"""Total envelope sizes tried, for a confirm call and a plain one each."""
_LETTERS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


@dataclass(frozen=True, slots=True)
class HostileOptions:
    """How much of each hostile case, and the guarantee of the worker."""

    guarantee: str = "at_least_once"
    reused_ids: int = 5
    rekeyed_decisions: int = 3
    replayed_decisions: int = 3
    flood: int = 200
    sizes: tuple[int, ...] = LIMIT_SIZES
    seed: int = 0
    max_seconds: float = 600.0


@dataclass(slots=True)
class HostileFigures:
    """What a hostile run reports: the counters must all be 0."""

    guarantee: str
    messages: int
    stalls: int
    """Probes (an echo behind a hostile message, same key) never answered ok."""
    lost_calls: int
    """Calls without any answer."""
    wrong_answers: int
    """Calls answered otherwise than the contract says (or more than once)."""
    records_changed: int
    """Re-keyed or replayed decisions that changed a record or ran a tool again."""
    worker_restarts: int
    final_lag: int
    duration_s: float
    examples: dict[str, list[str]] = field(default_factory=dict)
    by_case: dict[str, int] = field(default_factory=dict)
    """Stalls, lost calls, wrong answers and changed records per hostile case."""

    @property
    def passed(self) -> bool:
        return not (
            self.stalls
            or self.lost_calls
            or self.wrong_answers
            or self.records_changed
            or self.worker_restarts
            or self.final_lag
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


@dataclass(frozen=True, slots=True)
class Expect:
    """One call sent and the answers it may get: statuses, and an error kind when an error."""

    what: str
    message_id: str
    statuses: tuple[str, ...]
    kinds: tuple[str, ...] = ()
    case: str = ""
    """The hostile case it belongs to (`HostileFigures.by_case`)."""
    call_id: str | None = None
    """For calls that reuse ids: the answer is the call_id's `index`th (an answer from a
    record names the message that made it, not this one)."""
    index: int = 0


def sized_envelope(tool: str, size: int, rng: random.Random, run_id: str, call_id: str) -> bytes:
    """An envelope of exactly size bytes: its text argument is incompressible filler."""
    arguments: dict[str, Any] = {"customer": "", "amount_cents": 1} if tool != "echo" else {"t": ""}
    text_key = "customer" if tool != "echo" else "t"
    body = {"tool": tool, "arguments": arguments, "run_id": run_id, "call_id": call_id}
    room = size - len(orjson.dumps(body))
    arguments[text_key] = bytes(rng.choice(_LETTERS) for _ in range(max(0, room))).decode()
    return orjson.dumps(body)


def other_key(key: bytes, partitions: int) -> bytes:
    """A key that lands on another partition than key."""
    home = partition_for(key, partitions)
    n = 0
    while True:
        candidate = f"rekeyed-{n}".encode()
        if partition_for(candidate, partitions) != home:
            return candidate
        n += 1


class HostileRun:
    def __init__(
        self, options: HostileOptions, broker: BrokerControl | ClusterControl, workdir: Path
    ) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.settings: Settings = run_settings(
            broker.bootstrap,
            workdir,
            "hostile",
            partitions=PARTITIONS,
            decision_keys=HOSTILE_KEYS,
            processing_guarantee=options.guarantee,
        )
        self.keys = DecisionKeys.parse(HOSTILE_KEYS)
        self.ledger = workdir / "ledger.jsonl"
        self.pool = WorkerPool(
            self.settings, workdir / "workers", {"STREAM_ADAPTER_DEMO_LEDGER": str(self.ledger)}
        )
        exactly_once = options.guarantee == "exactly_once"
        self.reader = ReplyReader(self.settings, read_committed=exactly_once)
        self.expects: list[Expect] = []
        self.probes: list[str] = []
        self.sender: CallSender | None = None
        self.view: ApprovalsView | None = None
        """The approvals topic followed while the run decides: decisions are bound to records."""
        self.waiting = "sending"
        """What the run waits for now (for progress lines)."""

    async def run(self) -> HostileFigures:
        started = time.monotonic()
        await create_run_topics(self.settings)
        producer = producer_for(self.settings)
        await producer.start()
        self.sender = CallSender(self.settings, producer)
        await self.reader.start()
        try:
            worker = await self.pool.start("hostile")
            pid = worker.pid
            async with ApprovalsView(self.settings) as self.view:
                figures = await self._hostile(started)
            restarts = (worker.starts - 1) + (0 if worker.alive and worker.pid == pid else 1)
            figures.worker_restarts = restarts
            return figures
        finally:
            try:
                await self.reader.stop()
                await producer.stop()
            finally:
                await self.pool.stop_all()

    def _deadline_left(self, started: float) -> float:
        return max(5.0, started + self.options.max_seconds - time.monotonic())

    async def _send(self, value: bytes, key: bytes, *, topic: str | None = None, **kw: Any) -> str:
        assert self.sender is not None
        topic = topic or self.settings.calls_topic
        partition, offset = await self.sender.send(value, key=key, topic=topic, **kw)
        return f"{topic}:{partition}:{offset}"

    async def _call(
        self,
        what: str,
        value: bytes,
        key: bytes,
        *expect: str,
        kinds: tuple[str, ...] = (),
        call_id: str | None = None,
        index: int = 0,
    ) -> str:
        message_id = await self._send(value, key)
        case = what.split(":")[0]
        self.expects.append(Expect(what, message_id, tuple(expect), kinds, case, call_id, index))
        return message_id

    def _answers_to(self, expect: Expect) -> list[dict[str, Any]]:
        if expect.call_id is None:
            return self._answers(expect.message_id)
        return self.reader.by_call.get(expect.call_id, [])[expect.index : expect.index + 1]

    async def _probe(self, key: bytes) -> None:
        """An echo behind the hostile message on its key: answered ok while the key moves."""
        body = {"tool": "echo", "arguments": {"probe": True}, "call_id": uuid.uuid4().hex}
        self.probes.append(await self._send(orjson.dumps(body), key))

    def _answers(self, message_id: str) -> list[dict[str, Any]]:
        return self.reader.by_message.get(message_id, [])

    async def _decide(self, approval_id: str, *, key: bytes) -> bytes:
        """A signed approval bound to approval_id's record, as the review service writes it,
        sent keyed by key (another key than approval_id makes it a re-keyed decision)."""
        from stream_adapter.core.approvals import Decision
        from stream_adapter.review.decide import decision_message

        assert self.view is not None
        record = await wait_for_record(self.view, approval_id)
        decision = Decision(approval_id=approval_id, approved=True, reviewer="hostile")
        value, headers = decision_message(decision, self.keys, record)
        await self._send(value, key, topic=self.settings.decisions_topic, headers=headers)
        return value

    async def _pending(self, message_id: str, started: float) -> str | None:
        """The approval_id a parked call was answered with (None: no pending answer)."""

        def parked() -> bool:
            return any(r.get("status") for r in self._answers(message_id))

        await self.reader.until(parked, timeout_s=min(60.0, self._deadline_left(started)))
        for reply in self._answers(message_id):
            if reply.get("status") == "pending_approval":
                return str(reply["approval_id"])
        return None

    async def _hostile(self, started: float) -> HostileFigures:
        rng = self.rng
        sized_invoices: list[tuple[str, str]] = []  # (message_id, run_id) of parked big calls
        # Sizes at and around the envelope cap, a confirm and a plain call each.
        for size in self.options.sizes:
            for tool in ("send_invoice", "echo"):
                run_id, call_id = f"size-{size}-{tool}", uuid.uuid4().hex
                key = f"size-{size}".encode()
                fits = size <= MAX_ENVELOPE_BYTES
                status = (
                    ("pending_approval" if tool == "send_invoice" else "ok") if fits else "error"
                )
                kinds: tuple[str, ...] = () if fits else ("ToolUsageError",)
                value = sized_envelope(tool, size, rng, run_id, call_id)
                message_id = await self._call(
                    f"sizes: {tool} of {size} bytes", value, key, status, kinds=kinds
                )
                if tool == "send_invoice" and fits:
                    sized_invoices.append((message_id, run_id))
                await self._probe(key)

        # Reused ids with other arguments: the second is refused.
        for i in range(self.options.reused_ids):
            run_id, call_id, key = f"reuse-{i}", uuid.uuid4().hex, f"reuse-{i}".encode()
            first = {"customer": f"first-{i}", "amount_cents": 100 + i}
            second = {"customer": f"second-{i}", "amount_cents": 999_999}
            cases: list[tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]] = [
                (first, ("pending_approval",), ()),
                (second, ("error",), ("ToolUsageError",)),
            ]
            for index, (arguments, expect, reused_kinds) in enumerate(cases):
                body = {
                    "tool": "send_invoice",
                    "arguments": arguments,
                    "run_id": run_id,
                    "call_id": call_id,
                }
                await self._call(
                    f"reused ids: {i}",
                    orjson.dumps(body),
                    key,
                    *expect,
                    kinds=reused_kinds,
                    call_id=call_id,
                    index=index,
                )
            await self._probe(key)

        # Floods of identical calls: fresh ids each, and the very same ids each.
        flood_key, flood_call = b"flood", uuid.uuid4().hex
        same = orjson.dumps(
            {"tool": "send_invoice", "arguments": {"customer": "flood", "amount_cents": 1}}
        )
        same_ids = orjson.dumps(
            {
                "tool": "send_invoice",
                "arguments": {"customer": "flood", "amount_cents": 1},
                "run_id": "flood-run",
                "call_id": flood_call,
            }
        )
        echo_same = orjson.dumps({"tool": "echo", "arguments": {"flood": 1}})
        for n in range(self.options.flood):
            await self._call("floods: identical invoices", same, flood_key, "pending_approval")
            await self._call(
                "floods: invoices with the same ids",
                same_ids,
                flood_key,
                "pending_approval",
                call_id=flood_call,
                index=n,
            )
            await self._call("floods: identical echoes", echo_same, flood_key, "ok")
        await self._probe(flood_key)

        # Decisions: parked invoices to approve under another key, and to approve twice.
        tampered: list[tuple[str, str]] = []  # (approval_id, call_id) that must stay as they are
        replayed: list[str] = []  # call_ids that must run once
        for i in range(self.options.rekeyed_decisions + self.options.replayed_decisions):
            run_id, call_id, key = f"decide-{i}", uuid.uuid4().hex, f"decide-{i}".encode()
            body = {
                "tool": "send_invoice",
                "arguments": {"customer": f"d{i}", "amount_cents": 1},
                "run_id": run_id,
                "call_id": call_id,
            }
            message_id = await self._send(orjson.dumps(body), key)
            approval_id = await self._pending(message_id, started)
            if approval_id is None:
                self.expects.append(
                    Expect(
                        f"decisions: invoice {i}",
                        message_id,
                        ("pending_approval",),
                        case="decisions",
                    )
                )
                continue
            if i < self.options.rekeyed_decisions:
                await self._decide(approval_id, key=other_key(approval_id.encode(), PARTITIONS))
                tampered.append((approval_id, call_id))
            else:
                await self._decide(approval_id, key=approval_id.encode())
                await self.reader.until(
                    partial(self._outcome_seen, approval_id),
                    timeout_s=min(60.0, self._deadline_left(started)),
                )
                await self._decide(approval_id, key=approval_id.encode())  # the replay
                replayed.append(call_id)
            await self._probe(key)

        # The parked big calls, approved: each answers its outcome, or a small RecordTooLarge.
        outcome_ids: list[str] = []
        for message_id, _run_id in sized_invoices:
            approval_id = await self._pending(message_id, started)
            if approval_id is not None:
                await self._decide(approval_id, key=approval_id.encode())
                outcome_ids.append(approval_id)

        def settled() -> bool:
            calls = sum(not self._answers_to(e) for e in self.expects)
            probes = sum(not self._answers(p) for p in self.probes)
            outcomes = sum(self._outcome(a) is None for a in outcome_ids)
            self.waiting = f"waiting for {calls} calls, {probes} probes, {outcomes} outcomes"
            return not (calls or probes or outcomes)

        await self.reader.until(settled, timeout_s=self._deadline_left(started))
        lag = await settle_lag(self.settings, timeout_s=min(120.0, self._deadline_left(started)))
        return self._figures(started, lag, tampered, replayed, outcome_ids)

    def _outcome_seen(self, approval_id: str) -> bool:
        return self._outcome(approval_id) is not None

    def _outcome(self, approval_id: str) -> dict[str, Any] | None:
        for replies in self.reader.by_call.values():
            for reply in replies:
                if reply.get("approval_id") == approval_id and reply.get("status") in (
                    "ok",
                    "error",
                ):
                    return reply
        return None

    def _figures(
        self,
        started: float,
        lag: int,
        tampered: list[tuple[str, str]],
        replayed: list[str],
        outcome_ids: list[str],
    ) -> HostileFigures:
        lost, wrong, stalls, changed = [], [], [], []
        by_case: Counter[str] = Counter()
        for e in self.expects:
            answers = self._answers_to(e)
            if not answers:
                lost.append(f"{e.what} ({e.message_id})")
                by_case[e.case] += 1
            elif not _right(answers, e):
                got = [(a.get("status"), (a.get("error") or {}).get("kind")) for a in answers]
                wrong.append(f"{e.what}: {got}")
                by_case[e.case] += 1
        for approval_id in outcome_ids:
            reply = self._outcome(approval_id)
            if reply is None:
                lost.append(f"outcome of {approval_id}")
                by_case["sizes"] += 1
            elif reply["status"] == "error" and reply["error"].get("kind") != "RecordTooLarge":
                wrong.append(f"outcome of {approval_id}: {reply['error'].get('kind')}")
                by_case["sizes"] += 1
        for probe in self.probes:
            if [r.get("status") for r in self._answers(probe)] != ["ok"]:
                stalls.append(probe)
                by_case["probes"] += 1
        runs = ledger_counts(self.ledger)
        for approval_id, call_id in tampered:
            if runs[call_id] or self._outcome(approval_id) is not None:
                changed.append(f"re-keyed decision ran {approval_id}")
                by_case["re-keyed decisions"] += 1
        for call_id in replayed:
            if runs[call_id] != 1:
                changed.append(f"replayed decision: {call_id} ran {runs[call_id]} times")
                by_case["replayed decisions"] += 1
        return HostileFigures(
            guarantee=self.options.guarantee,
            messages=len(self.expects) + len(self.probes),
            stalls=len(stalls),
            lost_calls=len(lost),
            wrong_answers=len(wrong),
            records_changed=len(changed),
            worker_restarts=0,
            final_lag=lag,
            duration_s=round(time.monotonic() - started, 1),
            examples={
                "stalls": stalls[:5],
                "lost_calls": lost[:5],
                "wrong_answers": wrong[:5],
                "records_changed": changed[:5],
            },
            by_case=dict(by_case),
        )


def _right(answers: list[dict[str, Any]], expect: Expect) -> bool:
    """The call's first answer is one expected, and is not given twice (a parked call's later
    answers, its outcome and already_done, have other statuses)."""
    first = answers[0]
    if first.get("status") not in expect.statuses:
        return False
    if expect.kinds and (first.get("error") or {}).get("kind") not in expect.kinds:
        return False
    repeats: int = sum(a.get("status") == first.get("status") for a in answers)
    return repeats == 1


async def run_hostile(
    options: HostileOptions, broker: BrokerControl | ClusterControl, workdir: Path
) -> HostileFigures:
    """One hostile run against broker, its files under workdir."""
    return await HostileRun(options, broker, workdir).run()


def render_hostile(figures: HostileFigures, console: Console) -> None:
    render_figures(figures, console, f"hostile fuzz run ({figures.guarantee})", sep="; ")
