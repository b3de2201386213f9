"""CPU per call of the inline lane's own work, with no broker: where a fast call's µs go.

The worker's throughput on a backlog is what each call costs, and most of that cost is
ours, not the Kafka client's (docs/bench.md, "Where the at-least-once worker's time goes").
This times `InlineCalls.take` (envelope, ids, the tool, the result check, the reply, the
record appended to its batch) on echo envelopes, and each of its stages alone, in-process:
the numbers move with the code, not with the broker or the harness.

Run: ``python dev/benchmarks/lane_bench.py [--calls 20000] [--rounds 7]``; prints, per
stage, the median (min-max) over rounds of process CPU us per call. Compare two commits by
running both in interleaved rounds (A B A B ...), never one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from faust.types import TP
from faust.types.tuples import ConsumerMessage

from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.executor import Executor
from stream_adapter.core.ids import derive_ids, kafka_message_id
from stream_adapter.core.replies import ok_reply
from stream_adapter.core.retries import RetryPolicy
from stream_adapter.core.tools import ToolRegistry
from stream_adapter.settings import Settings
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.engine import RecordBatch
from stream_adapter.stream.inline import InlineCalls
from stream_adapter.stream.metrics import Metrics

TOPIC = "lane-bench-calls"
SCOPE = uuid.uuid4().hex
LZ4 = 0x03  # the batch attribute of the worker's default codec


class _Scopes:
    def current(self, topic: str) -> str:
        return SCOPE


class _Sender:
    """Builds real record batches; sends nothing (the lane is never flushed here)."""

    exactly_once = False

    def batch(self, size_bytes: int, *, transactional: bool = False) -> RecordBatch:
        return RecordBatch(size_bytes, LZ4, transactional=transactional)

    async def partition_count(self, topic: str) -> int:
        return 8


ROWS = 0
"""Rows of a small table in the echo's arguments, and so in its result (`--rows`): 0 is the
bench's echo call; 20 makes a result of about 1.3 KB, as a lookup tool might return."""


def _echo_payload(i: int) -> bytes:
    """The bench's echo envelope (stream_adapter_dev.bench.measure.echo_envelope's shape)."""
    return orjson.dumps({"tool": "echo", "arguments": _arguments(i)})


def _arguments(i: int) -> dict[str, Any]:
    arguments: dict[str, Any] = {"i": i, "text": "x" * 64}
    if ROWS:
        arguments["rows"] = [
            {"id": j, "name": f"customer-{j}", "amount_cents": j * 100, "tags": ["a", "b"]}
            for j in range(ROWS)
        ]
    return arguments


def _messages(n: int) -> list[Any]:
    tp = TP(TOPIC, 0)
    return [
        ConsumerMessage(
            topic=TOPIC,
            partition=0,
            offset=i,
            timestamp=0.0,
            timestamp_type=0,
            headers=[],
            key=None,
            value=_echo_payload(i),
            checksum=None,
            tp=tp,
        )
        for i in range(n)
    ]


def _context() -> FlowContext:
    registry = ToolRegistry()

    @registry.tool
    async def echo(**arguments: Any) -> dict[str, Any]:
        return arguments

    settings = Settings.for_app("lane-bench")
    return FlowContext(
        settings=settings,
        executor=Executor(registry),
        tools=None,
        outputs=None,  # type: ignore[arg-type]  # take() never writes outside its batches
        policy=RetryPolicy(attempts=1, base_s=0.0),
        keys=None,  # type: ignore[arg-type]
        metrics=Metrics(["echo"]),
        scopes=_Scopes(),  # type: ignore[arg-type]
    )


async def _lane(ctx: FlowContext) -> InlineCalls:
    sender: Any = _Sender()
    lane = InlineCalls(ctx, sender, ack=lambda messages: None, redo=lambda message, exc: None)
    await lane.start()
    return lane


Stage = Callable[[], float]
"""Runs one stage over fresh inputs (built before its clock starts): process CPU seconds."""


def _cpu(run: Callable[[], object]) -> float:
    began = time.process_time()
    run()
    return time.process_time() - began


def stages(ctx: FlowContext, lane: InlineCalls, calls: int) -> dict[str, Stage]:
    """Each stage by name, timed over `calls` inputs."""
    executor = ctx.executor
    tool = executor.resolve("echo", None)
    payloads = [_echo_payload(i) for i in range(calls)]
    ids = [kafka_message_id(TOPIC, 0, i) for i in range(calls)]
    pairs = list(zip(payloads, ids, strict=True))
    envelopes = [parse_envelope(p, message_id=m, scope=SCOPE) for p, m in pairs]
    results = [_arguments(i) for i in range(calls)]

    def take() -> float:
        messages = _messages(calls)
        handed_on = 0

        def run() -> None:
            nonlocal handed_on
            for message in messages:
                if lane.take(message, None) is not None:
                    handed_on += 1

        cpu = _cpu(run)
        if handed_on:
            raise SystemExit(f"the lane handed {handed_on} echo calls on")
        lane._batches.clear()  # nothing is ever sent: start each run with empty batches
        lane._full.clear()
        lane._keys.clear()
        return cpu

    def parse() -> None:
        for payload, message_id in pairs:
            parse_envelope(payload, message_id=message_id, scope=SCOPE)

    def derive() -> None:
        for message_id in ids:
            derive_ids(message_id, "", SCOPE)

    def run_now() -> None:
        for e in envelopes:
            executor.run_now(tool, e.arguments, run_id=e.run_id, call_id=e.call_id)

    def reply() -> None:
        for e, result in zip(envelopes, results, strict=True):
            orjson.dumps(ok_reply("echo", e.run_id, e.call_id, result))

    return {
        "take (whole lane)": take,
        "parse_envelope": lambda: _cpu(parse),
        "derive_ids": lambda: _cpu(derive),
        "run_now": lambda: _cpu(run_now),
        "reply build+encode": lambda: _cpu(reply),
    }


async def main(calls: int, rounds: int) -> None:
    ctx = _context()
    lane = await _lane(ctx)
    runs = stages(ctx, lane, calls)
    per_call: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            per_call[name].append(run() / calls * 1e6)
    print(f"{calls:,} calls a round, {rounds} rounds; process CPU us per call, median (min-max)")
    for name, values in per_call.items():
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"  {name:20} {mid:6.2f} ({low:.2f}-{high:.2f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rows", type=int, default=ROWS, help="rows in each result")
    args = parser.parse_args()
    ROWS = args.rows
    asyncio.run(main(args.calls, args.rounds))
