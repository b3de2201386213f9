"""Metrics, tracing and dead-letter replay pieces that need no broker."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from prometheus_client import generate_latest

from stream_adapter.core.ids import derive_ids
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.ops.dlq import DeadLetter, ReplaySkipped, replay_value
from stream_adapter.settings import Settings
from stream_adapter.stream.approvals import signature_of
from stream_adapter.stream.metrics import (
    UNKNOWN_TOOL,
    Metrics,
    Pending,
    count_pending,
    pending_approvals,
    table_tallies,
)
from stream_adapter.stream.tracing import Tracing, as_headers, build_tracing, traceparent


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_tool_labels_are_bounded_to_known_tools() -> None:
    metrics = Metrics(["echo"])
    metrics.replied("echo", "ok")
    for i in range(100):
        metrics.replied(f"made-up-{i}", "error")
    metrics.replied(None, "error")
    assert _value(metrics, "stream_adapter_calls_total", tool="echo", status="ok") == 1
    assert _value(metrics, "stream_adapter_calls_total", tool=UNKNOWN_TOOL, status="error") == 101
    assert len(metrics._calls) == 1  # unknown names are not cached either
    assert b"made-up" not in generate_latest(metrics.registry)


def test_run_bookkeeping_and_decision_wait() -> None:
    metrics = Metrics(["echo", "send_invoice"])
    started = metrics.started()
    assert _value(metrics, "stream_adapter_calls_in_flight") == 1
    metrics.finished("echo", started)
    metrics.retried("echo")
    metrics.dead_lettered("calls", "ToolFailed")
    metrics.decided("send_invoice", True, "2025-01-01T00:00:00.000Z", "2025-01-01T00:01:30.000Z")
    metrics.decided("send_invoice", False, "bad", "2025-01-01T00:00:00Z")  # ignored
    assert _value(metrics, "stream_adapter_calls_in_flight") == 0
    assert _value(metrics, "stream_adapter_call_seconds_count", tool="echo") == 1
    assert _value(metrics, "stream_adapter_retries_total", tool="echo") == 1
    assert _value(metrics, "stream_adapter_dead_letters_total", topic="calls", kind="ToolFailed")
    wait = "stream_adapter_approval_wait_seconds"
    assert _value(metrics, f"{wait}_sum", tool="send_invoice", verdict="approved") == 90
    assert _value(metrics, f"{wait}_count", tool="send_invoice", verdict="denied") is None


def test_call_seconds_buckets_count_each_run_once_at_or_below_its_bound() -> None:
    metrics = Metrics(["echo"])
    for seconds in (0.0005, 0.001, 0.0011, 60.0, 61.0):
        metrics.observe("echo", seconds)
    metrics.observe("made-up", 0.2)

    def bucket(le: str, tool: str = "echo") -> float | None:
        return _value(metrics, "stream_adapter_call_seconds_bucket", tool=tool, le=le)

    assert (bucket("0.001"), bucket("0.005"), bucket("60.0"), bucket("+Inf")) == (2, 3, 4, 5)
    assert _value(metrics, "stream_adapter_call_seconds_count", tool="echo") == 5
    assert _value(metrics, "stream_adapter_call_seconds_sum", tool="echo") == pytest.approx(
        121.0026
    )
    assert bucket("0.1", UNKNOWN_TOOL) == 0 and bucket("0.25", UNKNOWN_TOOL) == 1


def test_count_pending_reads_the_state_field_only() -> None:
    records = [
        orjson.dumps({"state": "pending", "arguments": {}}),
        orjson.dumps({"state": "done", "arguments": {"state": "pending"}}),
        b"not json",
    ]
    assert count_pending(records) == 1


def test_pending_approvals_finds_the_oldest_request() -> None:
    records = [
        orjson.dumps({"state": "pending", "requested_at": "2024-01-01T00:10:00.000Z"}),
        orjson.dumps({"state": "pending", "requested_at": "2024-01-01T00:00:00+00:00"}),
        orjson.dumps({"state": "done", "requested_at": "2023-01-01T00:00:00.000Z"}),
        orjson.dumps({"state": "pending", "requested_at": "not a time"}),
        b"not json",
    ]
    assert pending_approvals(records) == Pending(3, 1704067200.0)
    assert pending_approvals([]) == Pending(0, None)


def test_one_pass_tallies_pending_and_unknown_records() -> None:
    records = [
        orjson.dumps({"state": "pending", "requested_at": "2024-01-01T00:10:00.000Z"}),
        orjson.dumps({"state": "unknown", "unknown_at": "2024-01-02T00:00:00+00:00"}),
        orjson.dumps({"state": "unknown", "unknown_at": "2024-01-01T00:00:00+00:00"}),
        orjson.dumps({"state": "done", "arguments": {"note": "was pending, outcome unknown"}}),
        orjson.dumps({"state": "done", "unknown_at": "2023-01-01T00:00:00+00:00"}),  # resolved
        b'{"unknown": ',
    ]
    tallies = table_tallies(records)
    assert tallies.pending == Pending(1, 1704067800.0)
    assert tallies.unknown == 2
    assert tallies.oldest_unknown_at == datetime(2024, 1, 1, tzinfo=UTC)


def test_a_scrape_reads_the_table_once_for_both_gauges() -> None:
    metrics = Metrics(["echo"])
    reads: list[int] = []
    unknown = orjson.dumps({"state": "unknown", "unknown_at": "2024-01-01T00:00:00+00:00"})

    def table() -> list[bytes]:
        reads.append(1)
        return [unknown]

    metrics.watch(lambda: [], table, pending_every_s=60)
    assert _value(metrics, "stream_adapter_unknown_outcomes") == 1
    assert _value(metrics, "stream_adapter_pending_approvals") == 0
    assert len(reads) == 1  # both scrapes, both gauges: one read within pending_every_s


def test_oldest_pending_age_and_lag_are_read_at_scrape_time() -> None:
    metrics = Metrics(["echo"], approval_age_limit_s=1800)
    one = orjson.dumps({"state": "pending", "requested_at": "2024-01-01T00:00:00.000Z"})
    tables = [[one], []]
    metrics.watch(lambda: [("calls", 3, 7)], lambda: tables[0], pending_every_s=0)
    age = _value(metrics, "stream_adapter_oldest_pending_approval_age_seconds")
    assert age is not None and age > 365 * 86400
    assert _value(metrics, "stream_adapter_pending_approval_age_limit_seconds") == 1800
    lag = "stream_adapter_consumer_lag_messages"
    assert _value(metrics, lag, topic="calls", partition="3") == 7
    tables.pop(0)
    assert _value(metrics, "stream_adapter_oldest_pending_approval_age_seconds") == 0
    assert _value(metrics, "stream_adapter_pending_approvals") == 0
    assert _value(Metrics(), "stream_adapter_pending_approval_age_limit_seconds") is None


def test_process_and_build_info_are_exported() -> None:
    metrics = Metrics()
    text = generate_latest(metrics.registry).decode()
    assert 'stream_adapter_build_info{aiokafka="' in text and 'faust="0.15.3"' in text
    assert (_value(metrics, "process_resident_memory_bytes") or 0) > 0
    assert _value(metrics, "process_cpu_seconds_total") is not None
    assert "python_info{" in text


def test_decisions_are_counted_by_signature() -> None:
    keys, none = DecisionKeys.parse("k1:secret"), DecisionKeys.parse("")
    value = b'{"approval_id": "a", "approved": true, "reviewer": "r"}'
    assert signature_of(keys, keys.sign(value)) == "signed"
    assert signature_of(none, {}) == "unsigned"
    assert signature_of(none, keys.sign(value)) == "unchecked"
    allowing = DecisionKeys.parse("k1:secret", allow_unsigned=True)
    assert signature_of(allowing, {}) == "unsigned"  # accepted unsigned, counted as such
    metrics = Metrics()
    for signature in ("signed", "unsigned", "unsigned", "invalid"):
        metrics.decision_read(signature)
    counts = {
        s: _value(metrics, "stream_adapter_decisions_total", signature=s)
        for s in ("signed", "unsigned", "invalid", "unchecked")
    }
    assert counts == {"signed": 1, "unsigned": 2, "invalid": 1, "unchecked": 0}


def test_tracing_off_is_none_and_on_continues_the_parent() -> None:
    assert build_tracing(False, "app") is None
    tracing = Tracing("unit")
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    incoming = {"traceparent": f"00-{trace_id}-{parent}-01".encode()}
    with tracing.span("tool echo", incoming, tool="echo") as out:
        tracing.failed("ToolFailed")
    headers = dict(out)
    _, got_trace, got_span, _ = headers["traceparent"].decode().split("-")
    assert got_trace == trace_id and got_span != parent
    assert traceparent(incoming) == incoming["traceparent"].decode()
    assert as_headers(None) == {} and traceparent({"traceparent": b"\xff"}) is None


@pytest.fixture
def settings() -> Settings:
    return Settings(calls_topic="calls", decisions_topic="decisions")


def _letter(value: bytes, topic: str, message_id: str) -> DeadLetter:
    headers = {"source-topic": topic, "message-id": message_id, "error-kind": "ToolFailed"}
    return DeadLetter(0, 0, b"k", value, headers)


def test_replay_spells_out_the_originally_derived_ids(settings: Settings) -> None:
    letter = _letter(b'{"tool": "boom", "arguments": {}}', "calls", "calls:3:17")
    body = orjson.loads(replay_value(settings, letter))
    assert (body["run_id"], body["call_id"]) == derive_ids("calls:3:17", settings.source)
    given = _letter(b'{"tool": "t", "arguments": {}, "run_id": "r", "call_id": "c"}', "calls", "x")
    assert orjson.loads(replay_value(settings, given))["run_id"] == "r"


@pytest.mark.parametrize(
    ("value", "topic", "message_id", "reason"),
    [
        (b'{"approval_id": "a", "approved": true}', "decisions", "decisions:0:1", "calls topic"),
        (b"{not json", "calls", "calls:0:1", "not a valid envelope"),
        (b'{"tool": "t", "arguments": {}}', "calls", "", "no message-id"),
    ],
)
def test_replay_skips_what_it_cannot_replay_as_the_same_call(
    settings: Settings, value: bytes, topic: str, message_id: str, reason: str
) -> None:
    with pytest.raises(ReplaySkipped, match=reason):
        replay_value(settings, _letter(value, topic, message_id))
