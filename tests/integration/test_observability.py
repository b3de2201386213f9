"""Observability end to end: the worker's /metrics after a known mix of calls, and trace context
carried from a call (and a decision) to its reply."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.harness import Client, Metrics, WorkerProcess, unique, wait_for, wait_lag_zero

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture
async def traced_worker(worker_factory: Any) -> WorkerProcess:
    """A worker with OpenTelemetry on (the SDK is in the test extra)."""
    started: WorkerProcess = worker_factory(STREAM_ADAPTER_OTEL_ENABLED="true")
    await started.ready()
    return started


async def scrape(worker: WorkerProcess) -> Metrics:
    return await asyncio.to_thread(worker.metrics)


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_count_a_known_mix_of_calls(
    traced_worker: WorkerProcess, client: Client
) -> None:
    worker = traced_worker
    calls = worker.settings.calls_topic
    sent = [await client.call("echo", {"i": i}, key=f"e{i}".encode()) for i in range(3)]
    sent += [await client.call("add", {"a": i, "b": 1}) for i in range(2)]
    sent.append(await client.call("add", {"a": "x", "b": 1}))  # 422: error + dead letter
    sent.append(await client.call("boom"))  # ToolFailed: error + dead letter
    sent.append(await client.call("nope"))  # ToolNotFound: label <unknown>
    sent.append(await client.call("flaky", {"key": unique("k"), "fail_times": 1}))
    run_id = unique("run")
    await client.call(
        "send_invoice", {"customer": "acme", "amount_cents": 5}, run_id=run_id, call_id="c1"
    )
    for s in sent:
        await client.reply_for(run_id=s.run_id)
    pending = await client.reply_for(status="pending_approval", run_id=run_id)

    async def parked() -> Metrics | None:
        now = await scrape(worker)
        return now if value(now, "stream_adapter_pending_approvals") == 1 else None

    waiting = await wait_for(parked, timeout_s=20, what="one pending approval", interval_s=0.5)
    age = value(waiting, "stream_adapter_oldest_pending_approval_age_seconds")
    assert 0 < age < 300, age
    limit = value(waiting, "stream_adapter_pending_approval_age_limit_seconds")
    assert limit == worker.settings.pending_approval_age_limit_s
    await client.decide(pending["approval_id"], True)  # unsigned: this worker has no keys
    await client.reply_for(status="ok", run_id=run_id)

    counts = {
        ("echo", "ok"): 3,
        ("add", "ok"): 2,
        ("add", "error"): 1,
        ("boom", "error"): 1,
        ("<unknown>", "error"): 1,
        ("flaky", "ok"): 1,
        ("send_invoice", "pending_approval"): 1,
        ("send_invoice", "ok"): 1,
    }

    async def counted() -> Metrics | None:
        # A reply can reach the reader a moment before its writer counts it.
        now = await scrape(worker)
        done = value(now, "stream_adapter_calls_total", tool="send_invoice", status="ok") >= 1
        return now if done and value(now, "stream_adapter_calls_in_flight") == 0 else None

    samples = await wait_for(counted, timeout_s=10, what="the resumed call counted", interval_s=0.2)
    for (tool, status), expected in counts.items():
        got = value(samples, "stream_adapter_calls_total", tool=tool, status=status)
        assert got == expected, (tool, status, got)
    total = sum(v for (name, _), v in samples.items() if name == "stream_adapter_calls_total")
    assert total == sum(counts.values())
    assert value(samples, "stream_adapter_retries_total", tool="flaky") == 1
    for kind in ("ToolUsageError", "ToolFailed", "ToolNotFound"):
        assert value(samples, "stream_adapter_dead_letters_total", topic=calls, kind=kind) == 1
    assert value(samples, "stream_adapter_call_seconds_count", tool="echo") == 3
    assert value(samples, "stream_adapter_call_seconds_count", tool="send_invoice") == 1
    assert value(samples, "stream_adapter_calls_in_flight") == 0
    wait = "stream_adapter_approval_wait_seconds_count"
    assert value(samples, wait, tool="send_invoice", verdict="approved") == 1
    decisions = "stream_adapter_decisions_total"
    assert value(samples, decisions, signature="signed") == 1  # the harness signs, as review does
    assert value(samples, decisions, signature="unsigned") == 0
    assert value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "process_resident_memory_bytes") > 10 * 2**20
    [build] = [dict(labels) for name, labels in samples if name == "stream_adapter_build_info"]
    assert build["faust"] == "0.15.3" and build["version"] and build["python"].startswith("3.")

    async def drained() -> bool:
        now = await scrape(worker)
        lags = {k: v for k, v in now.items() if k[0] == "stream_adapter_consumer_lag_messages"}
        partitions = {dict(k[1])["partition"] for k in lags if dict(k[1])["topic"] == calls}
        return (
            value(now, "stream_adapter_pending_approvals") == 0
            and value(now, "stream_adapter_oldest_pending_approval_age_seconds") == 0
            and len(partitions) == worker.settings.partitions
            and not any(lags.values())
        )

    await wait_lag_zero(worker.settings)
    await wait_for(drained, timeout_s=30, what="lag 0 on every partition", interval_s=0.5)


def _trace(headers: dict[str, bytes]) -> tuple[str, str, str, str]:
    version, trace_id, span_id, flags = headers["traceparent"].decode().split("-")
    return version, trace_id, span_id, flags


async def test_traceparent_continues_from_call_to_reply(
    traced_worker: WorkerProcess, client: Client
) -> None:
    header = [("traceparent", f"00-{TRACE_ID}-{PARENT_SPAN}-01".encode())]
    ok_run, err_run = unique("run"), unique("run")
    await client.send(
        {"tool": "echo", "arguments": {}, "run_id": ok_run, "call_id": "c"}, headers=header
    )
    await client.send(
        {"tool": "boom", "arguments": {}, "run_id": err_run, "call_id": "c"}, headers=header
    )
    for run_id in (ok_run, err_run):
        await client.reply_for(run_id=run_id)
        index = next(i for i, r in enumerate(client.replies) if r["run_id"] == run_id)
        version, trace_id, span_id, _ = _trace(client.reply_headers[index])
        assert (version, trace_id) == ("00", TRACE_ID)
        assert span_id != PARENT_SPAN  # the worker's own span, a child of the caller's


async def test_traceparent_follows_the_approval_path(
    traced_worker: WorkerProcess, client: Client
) -> None:
    run_id = unique("run")
    await client.send(
        {
            "tool": "send_invoice",
            "arguments": {"customer": "a", "amount_cents": 1},
            "run_id": run_id,
            "call_id": "c",
        },
        headers=[("traceparent", f"00-{TRACE_ID}-{PARENT_SPAN}-01".encode())],
    )
    pending = await client.reply_for(status="pending_approval", run_id=run_id)
    index = client.replies.index(pending)
    assert _trace(client.reply_headers[index])[1] == TRACE_ID

    review_trace = "0af7651916cd43dd8448eb211c80319c"
    await client.decide(
        pending["approval_id"],
        True,
        headers=[("traceparent", f"00-{review_trace}-b7ad6b7169203331-01".encode())],
    )
    ok = await client.reply_for(status="ok", run_id=run_id)
    assert _trace(client.reply_headers[client.replies.index(ok)])[1] == review_trace


async def test_worker_logs_json_lines_with_ids_and_kinds(
    worker_factory: Any, client: Client
) -> None:
    worker: WorkerProcess = worker_factory(STREAM_ADAPTER_LOG_FORMAT="json")
    await worker.ready()
    sent = await client.call("boom")
    await client.reply_for(status="error", run_id=sent.run_id)

    def failed_line() -> dict[str, Any] | None:
        for line in worker.log_text().splitlines():
            if line.startswith("{") and '"call failed"' in line:
                return dict(orjson.loads(line))
        return None

    record = await wait_for(failed_line, timeout_s=10, what="a JSON 'call failed' line")
    assert record["level"] == "WARNING"
    assert record["logger"] == "stream_adapter"
    assert record["tool"] == "boom"
    assert record["error_kind"] == "ToolFailed"
    assert (record["run_id"], record["call_id"]) == (sent.run_id, sent.call_id)
    assert record["message_id"] == sent.message_id
    ours = [line for line in worker.log_text().splitlines() if "stream_adapter" in line]
    assert ours and all(line.startswith("{") for line in ours), [
        line for line in ours if not line.startswith("{")
    ][:3]
