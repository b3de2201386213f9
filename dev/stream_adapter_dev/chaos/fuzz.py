"""The fuzz run: malformed calls and decisions, interleaved with valid ones, at one worker.

Checks: every malformed call gets exactly one error reply and one dead letter; every
malformed decision exactly one dead letter and no effect (unsigned decisions for real pending
approvals run nothing); every valid call its reply; the worker process is never restarted;
lag 0 at the end.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from stream_adapter.core.approvals import ApprovalRecord
from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.errors import AdapterError
from stream_adapter.core.ids import derive_ids
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import topic_scope

from .cluster_faults import ClusterControl
from .environment import create_run_topics, run_settings
from .harness import BrokerControl, WorkerPool
from .load import CallSender, CallSpec, producer_for
from .malformed import (
    Headers,
    call_strategy,
    decision_strategy,
    fill,
    generated,
    handcrafted_calls,
    handcrafted_decisions,
    is_malformed_call,
    is_rejected_decision,
)
from .observe import ReplyReader, read_topic, settle_lag
from .report import ledger_counts, render_figures

FUZZ_KEYS = "fuzz-1:fuzz-secret-one-0123456789abcdef,fuzz-2:fuzz-secret-two-0123456789abcdef"


@dataclass(frozen=True, slots=True)
class FuzzOptions:
    """How many messages of each kind."""

    calls: int = 10_000
    decisions: int = 1_000
    valid_every: int = 10  # one valid call after this many malformed ones
    invoices: int = 5  # real approvals that unsigned decisions try to approve
    seed: int = 0
    max_seconds: float = 1200.0


@dataclass(slots=True)
class FuzzFigures:
    """What a fuzz run reports."""

    malformed_calls: int
    malformed_decisions: int
    valid_calls: int
    oversized_calls: int
    calls_without_one_error_reply: int
    calls_without_one_dead_letter: int
    decisions_without_one_dead_letter: int
    valid_calls_without_reply: int
    invoices_run_before_signed_decision: int
    invoices_run_after_signed_decision: int
    worker_restarts: int
    jobs_crashed: int
    final_lag: int
    duration_s: float
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return (
            self.calls_without_one_error_reply == 0
            and self.calls_without_one_dead_letter == 0
            and self.decisions_without_one_dead_letter == 0
            and self.valid_calls_without_reply == 0
            and self.invoices_run_before_signed_decision == 0
            and self.invoices_run_after_signed_decision == self.invoices_ok_expected
            and self.worker_restarts == 0
            and self.final_lag == 0
        )

    invoices_ok_expected: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def build_calls(options: FuzzOptions, rng: random.Random) -> list[bytes]:
    hand = handcrafted_calls()
    made = [
        p for p in generated(call_strategy(), options.calls, options.seed) if is_malformed_call(p)
    ]
    return fill(hand, made, options.calls, rng)


def build_decisions(
    options: FuzzOptions, rng: random.Random, keys: DecisionKeys, pending: list[str]
) -> list[tuple[bytes, Headers]]:
    hand = handcrafted_decisions(keys, pending)
    made: list[tuple[bytes, Headers]] = []
    for value in generated(decision_strategy(), options.decisions, options.seed + 1):
        headers = list(keys.sign(value).items()) if rng.random() < 0.5 else []
        if is_rejected_decision(value, headers, keys):
            made.append((value, headers))
    return fill(hand, made, options.decisions, rng)


class FuzzRun:
    def __init__(
        self, options: FuzzOptions, broker: BrokerControl | ClusterControl, workdir: Path
    ) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.settings: Settings = run_settings(
            broker.bootstrap, workdir, "fuzz", partitions=4, decision_keys=FUZZ_KEYS
        )
        self.keys = DecisionKeys.parse(FUZZ_KEYS)
        self.ledger = workdir / "ledger.jsonl"
        self.pool = WorkerPool(
            self.settings, workdir / "workers", {"STREAM_ADAPTER_DEMO_LEDGER": str(self.ledger)}
        )
        self.reader = ReplyReader(self.settings, read_committed=False)

    async def run(self) -> FuzzFigures:
        started = time.monotonic()
        deadline = started + self.options.max_seconds
        await create_run_topics(self.settings)
        producer = producer_for(self.settings)
        await producer.start()
        sender = CallSender(self.settings, producer)
        await self.reader.start()
        try:
            worker = await self.pool.start("fuzz")
            pid = worker.pid
            return await self._fuzz(sender, started, deadline, pid)
        finally:
            try:
                await self.reader.stop()
                await producer.stop()
            finally:
                await self.pool.stop_all()

    def _remaining(self, deadline: float) -> float:
        return max(5.0, deadline - time.monotonic())

    async def _fuzz(
        self, sender: CallSender, started: float, deadline: float, pid: int | None
    ) -> FuzzFigures:
        source = self.settings.source
        scope = await topic_scope(self.settings, self.settings.calls_topic)
        invoices = [
            CallSpec(
                "send_invoice",
                {"customer": f"f{i}", "amount_cents": i + 1},
                f"inv-run-{i}",
                f"inv-{uuid.uuid4().hex}",
            )
            for i in range(self.options.invoices)
        ]
        for spec in invoices:
            await sender.send(spec.envelope(), key=spec.run_id.encode())
        pending: dict[str, str] = {}

        def all_pending() -> bool:
            for spec in invoices:
                for reply in self.reader.by_call.get(spec.call_id, ()):
                    if reply.get("status") == "pending_approval":
                        pending[spec.call_id] = str(reply["approval_id"])
            return len(pending) == len(invoices)

        await self.reader.until(all_pending, timeout_s=60)

        payloads = build_calls(self.options, self.rng)
        decisions = build_decisions(self.options, self.rng, self.keys, list(pending.values()))
        malformed: list[tuple[str, str, str]] = []  # (message_id, run_id, call_id)
        valid: list[CallSpec] = []
        decision_ids: list[str] = []
        oversized = 0
        calls_topic, decisions_topic = self.settings.calls_topic, self.settings.decisions_topic
        d = iter(decisions)
        step = max(1, len(payloads) // max(1, len(decisions)))
        batch: list[Awaitable[tuple[int, int]]] = []
        kinds: list[tuple[str, Any]] = []  # what each send of the batch was

        async def flush() -> None:
            for (kind, item), (p, o) in zip(kinds, await asyncio.gather(*batch), strict=True):
                if kind == "bad":
                    message_id = f"{calls_topic}:{p}:{o}"
                    malformed.append((message_id, *expected_ids(item, message_id, source, scope)))
                elif kind == "valid":
                    valid.append(item)
                else:
                    decision_ids.append(f"{decisions_topic}:{p}:{o}")
            batch.clear()
            kinds.clear()

        for i, payload in enumerate(payloads):
            oversized += len(payload) > (1 << 20)
            batch.append(sender.send(payload, key=f"k{i % 37}".encode()))
            kinds.append(("bad", payload))
            if i % self.options.valid_every == 0:
                spec = CallSpec("echo", {"i": i}, f"ok-run-{i % 37}", f"ok-{uuid.uuid4().hex}")
                batch.append(sender.send(spec.envelope(), key=spec.run_id.encode()))
                kinds.append(("valid", spec))
            decision = next(d, None) if i % step == 0 else None
            if decision is not None:
                value, headers = decision
                batch.append(sender.send(value, key=b"d", topic=decisions_topic, headers=headers))
                kinds.append(("decision", None))
            if len(batch) >= 256:  # pipelined: the producer keeps each partition's order
                await flush()
        for value, headers in d:
            batch.append(sender.send(value, key=b"d", topic=decisions_topic, headers=headers))
            kinds.append(("decision", None))
        await flush()

        def answered() -> bool:
            return all(self.reader.by_message.get(m) for m, _, _ in malformed) and all(
                self.reader.by_call.get(v.call_id) for v in valid
            )

        await self.reader.until(answered, timeout_s=self._remaining(deadline))
        lag = await settle_lag(self.settings, timeout_s=min(120.0, self._remaining(deadline)))
        ran_before = sum(ledger_counts(self.ledger).values())

        # Now the real, signed decisions (bound to their records): each invoice runs once.
        records = {
            m.key: ApprovalRecord.from_bytes(m.value)
            for m in await read_topic(self.settings, self.settings.approvals_topic)
            if m.value is not None
        }
        for approval_id in pending.values():
            value, headers = _signed_approval(self.keys, records[approval_id.encode()])
            await sender.send(
                value,
                key=approval_id.encode(),
                topic=self.settings.decisions_topic,
                headers=headers,
            )

        def invoices_done() -> bool:
            return all(
                any(r.get("status") == "ok" for r in self.reader.by_call.get(s.call_id, ()))
                for s in invoices
            )

        await self.reader.until(invoices_done, timeout_s=60)
        lag = await settle_lag(self.settings, timeout_s=min(120.0, self._remaining(deadline)))
        dead = await read_topic(self.settings, self.settings.dlq_topic)
        letters = Counter(dict(m.headers).get("message-id", b"").decode() for m in dead)
        worker = self.pool.workers["fuzz"]
        crashed = worker.log_since_start().count(b"job crashed")
        bad_reply = [
            m
            for m, _, c in malformed
            if [r.get("status") for r in self.reader.by_message.get(m, [])] != ["error"]
            or self.reader.by_message[m][0].get("call_id") != c
        ]
        bad_letter = [m for m, _, _ in malformed if letters[m] != 1]
        bad_decision = [m for m in decision_ids if letters[m] != 1]
        missing_valid = [
            v.call_id
            for v in valid
            if [r.get("status") for r in self.reader.by_call.get(v.call_id, [])] != ["ok"]
        ]
        restarts = (worker.starts - 1) + (0 if worker.alive and worker.pid == pid else 1)
        return FuzzFigures(
            malformed_calls=len(malformed),
            malformed_decisions=len(decision_ids),
            valid_calls=len(valid),
            oversized_calls=oversized,
            calls_without_one_error_reply=len(bad_reply),
            calls_without_one_dead_letter=len(bad_letter),
            decisions_without_one_dead_letter=len(bad_decision),
            valid_calls_without_reply=len(missing_valid),
            invoices_run_before_signed_decision=ran_before,
            invoices_run_after_signed_decision=sum(ledger_counts(self.ledger).values())
            - ran_before,
            invoices_ok_expected=len(invoices),
            worker_restarts=restarts,
            jobs_crashed=crashed,
            final_lag=lag,
            duration_s=round(time.monotonic() - started, 1),
            examples={
                "calls_without_one_error_reply": bad_reply[:5],
                "calls_without_one_dead_letter": bad_letter[:5],
                "decisions_without_one_dead_letter": bad_decision[:5],
                "valid_calls_without_reply": missing_valid[:5],
            },
        )


def expected_ids(payload: bytes, message_id: str, source: str, scope: str) -> tuple[str, str]:
    """The ids a bad call's error reply carries: its own when it parses (an unknown tool, an
    unknown approval), else those derived from its delivery id."""
    try:
        envelope = parse_envelope(payload, message_id=message_id, source=source, scope=scope)
    except AdapterError:
        return derive_ids(message_id, source, scope)
    return envelope.run_id, envelope.call_id


def _signed_approval(keys: DecisionKeys, record: ApprovalRecord) -> tuple[bytes, Headers]:
    from stream_adapter.core.approvals import Decision
    from stream_adapter.review.decide import decision_message

    decision = Decision(approval_id=record.approval_id, approved=True, reviewer="fuzz")
    return decision_message(decision, keys, record)


async def run_fuzz(
    options: FuzzOptions, broker: BrokerControl | ClusterControl, workdir: Path
) -> FuzzFigures:
    """One fuzz run against broker, its files under workdir."""
    return await FuzzRun(options, broker, workdir).run()


def render_fuzz(figures: FuzzFigures, console: Console) -> None:
    render_figures(figures, console, "fuzz run")
