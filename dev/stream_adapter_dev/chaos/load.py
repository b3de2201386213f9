"""The chaos run's load: a mix of demo calls, the producer that sends them, and a reviewer bot.

Every call carries explicit ids (`run_id` is the Kafka key, so a run's calls stay in order),
which is how replies, ledger lines and approval records are matched to calls afterwards.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from stream_adapter.core import logs
from stream_adapter.core.approvals import ApprovalRecord, Decision
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.review.decide import decision_message
from stream_adapter.settings import Settings

from .observe import FETCH_BYTES

# tool -> share of the mix; sleep stays well under the tool's 2 s timeout.
MIX: dict[str, float] = {
    "echo": 0.45,
    "flaky": 0.15,
    "sleep": 0.10,
    "boom": 0.10,
    "send_invoice": 0.12,
    "wire_funds": 0.08,
}
EXPECTED = {
    "echo": "ok",
    "flaky": "ok",
    "sleep": "ok",
    "boom": "error",
    "send_invoice": "ok",
    "wire_funds": "ok",
}
APPROVED: dict[str, bool] = {"send_invoice": True, "wire_funds": False}
"""The demo's tools that wait for a reviewer (every such call is approved), and whether each is
idempotent: send_invoice runs again after a crash with the same call_id and writes one ledger
line per call; wire_funds runs at most once, writes a line per run, and a run that died with its
worker ends `unknown`."""
REVIEWER = "chaos-reviewer"


@dataclass(frozen=True, slots=True)
class CallSpec:
    """One call of the mix."""

    tool: str
    arguments: dict[str, Any]
    run_id: str
    call_id: str

    def envelope(self) -> bytes:
        return orjson.dumps(
            {
                "tool": self.tool,
                "arguments": self.arguments,
                "run_id": self.run_id,
                "call_id": self.call_id,
            }
        )


def call_arguments(tool: str, rng: random.Random, call_id: str) -> dict[str, Any]:
    """Arguments for a call of tool as the mix draws them."""
    if tool == "echo":
        return {"n": rng.randrange(1 << 30), "text": "x" * rng.randrange(64)}
    if tool == "flaky":  # at most 2 failures: the third attempt (the default) succeeds
        return {"key": call_id, "fail_times": rng.randrange(3)}
    if tool == "sleep":
        return {"seconds": round(rng.uniform(0.01, 0.3), 3)}
    if tool == "send_invoice":
        return {"customer": f"cust-{rng.randrange(1000)}", "amount_cents": rng.randrange(1, 10**6)}
    if tool == "wire_funds":
        return {"account": f"acct-{rng.randrange(1000)}", "amount_cents": rng.randrange(1, 10**6)}
    return {}


def call_mix(count: int, rng: random.Random, *, runs: int | None = None) -> list[CallSpec]:
    """count calls drawn from MIX, spread over `runs` run ids (Kafka keys)."""
    runs = runs or max(16, count // 20)
    run_ids = [f"run-{uuid.UUID(int=rng.getrandbits(128)).hex[:16]}" for _ in range(runs)]
    tools = rng.choices(list(MIX), weights=list(MIX.values()), k=count)
    out = []
    for i, tool in enumerate(tools):
        call_id = f"call-{i:06d}-{uuid.UUID(int=rng.getrandbits(128)).hex[:12]}"
        out.append(CallSpec(tool, call_arguments(tool, rng, call_id), rng.choice(run_ids), call_id))
    return out


def producer_for(settings: Settings) -> AIOKafkaProducer:
    """An idempotent, all-acks producer that rides out a broker restart by retrying inside."""
    return kafka_clients.producer(
        settings,
        enable_idempotence=True,
        request_timeout_ms=120_000,
        max_request_size=FETCH_BYTES,
    )


class CallSender:
    """Sends envelopes; a send that fails outright is sent again and counted (`resends`)."""

    def __init__(self, settings: Settings, producer: AIOKafkaProducer) -> None:
        self.settings = settings
        self.producer = producer
        self.resends = 0

    async def send(
        self,
        value: bytes,
        *,
        key: bytes | None,
        topic: str | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> tuple[int, int]:
        """Produce one message and wait for its ack; (partition, offset)."""
        for attempt in range(5):
            try:
                meta = await self.producer.send_and_wait(
                    topic or self.settings.calls_topic,
                    value,
                    key=key,
                    partition=partition,
                    headers=headers,
                )
                return meta.partition, meta.offset
            except Exception as exc:  # the broker is down: try again, and say so
                if attempt == 4:
                    raise
                self.resends += 1
                logs.event(
                    logs.WARNING, "send failed, sending again", error_kind=type(exc).__name__
                )
                await asyncio.sleep(1.0)
        raise AssertionError("unreachable")


RECORD_WAIT_S = 120.0
"""How long the auto-reviewer waits to read a parked call's record before deciding it."""


async def wait_for_record(view: Any, approval_id: str) -> ApprovalRecord | None:
    """approval_id's record once view shows it (None past RECORD_WAIT_S)."""

    def shown(current: Any) -> bool:
        return current.get(approval_id) is not None

    await view.wait_for(shown, RECORD_WAIT_S)
    record: ApprovalRecord | None = view.get(approval_id)
    return record


class AutoReviewer:
    """Approves each call that waits for a reviewer once, as its first pending_approval reply
    arrives."""

    def __init__(self, sender: CallSender, keys: DecisionKeys) -> None:
        self.sender = sender
        self.keys = keys
        self.decided: set[str] = set()
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def on_reply(self, reply: dict[str, Any]) -> None:
        """ReplyReader hook."""
        approval_id = reply.get("approval_id")
        if reply.get("status") == "pending_approval" and approval_id not in self.decided:
            self.decided.add(str(approval_id))
            self._queue.put_nowait(str(approval_id))

    def start(self) -> None:
        self._task = asyncio.create_task(self._decide())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _decide(self) -> None:
        """Sign each decision bound to its record, as the review service does: the records
        come from following the approvals topic."""
        from stream_adapter.review.view import ApprovalsView

        topic = self.sender.settings.decisions_topic
        async with ApprovalsView(self.sender.settings) as view:
            while True:
                approval_id = await self._queue.get()
                record = await wait_for_record(view, approval_id)
                if record is None:
                    logs.event(logs.WARNING, "no record to decide", approval_id=approval_id)
                    continue
                decision = Decision(approval_id=approval_id, approved=True, reviewer=REVIEWER)
                value, headers = decision_message(decision, self.keys, record)
                await self.sender.send(
                    value, key=approval_id.encode(), topic=topic, headers=headers
                )
