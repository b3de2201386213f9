"""The limits on what the worker writes: checked before a send, mapped when the broker
refuses, and kept by the topics it creates (contract §10, "Limits")."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import errors as kafka_errors

from stream_adapter.core.approvals import ApprovalState, begin_run, new_record
from stream_adapter.core.envelope import MAX_RECORD_BYTES, TOPIC_MAX_MESSAGE_BYTES, parse_envelope
from stream_adapter.core.errors import RecordTooLarge, ToolUsageError
from stream_adapter.core.record_limits import STEP_ROOM_BYTES, check_parkable, finish_within
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.settings import Settings
from stream_adapter.stream.engine import Delivery
from stream_adapter.stream.engine.producer import acked, check_size
from stream_adapter.stream.topics import topic_specs


@pytest.mark.parametrize(
    "error",
    [
        kafka_errors.MessageSizeTooLargeError,
        kafka_errors.RecordTooLargeError,
        kafka_errors.RecordListTooLargeError,
    ],
)
def test_the_brokers_size_refusal_is_not_retryable(error: type[Exception]) -> None:
    mapped = kafka_clients.kafka_error(error(), "write tool-replies")
    assert isinstance(mapped, RecordTooLarge) and isinstance(mapped, ToolUsageError)
    assert mapped.status == 413 and not mapped.retryable


def test_a_refused_send_is_raised_as_record_too_large() -> None:
    async def refused() -> None:
        raise kafka_errors.MessageSizeTooLargeError()

    with pytest.raises(RecordTooLarge):
        asyncio.run(acked(refused(), "tool-replies"))


def test_records_above_the_limit_are_refused_before_a_send() -> None:
    check_size("t", b"k" * 10, b"v" * (MAX_RECORD_BYTES - 20), [("h", b"123456789")])
    with pytest.raises(RecordTooLarge):
        check_size("t", b"k" * 10, b"v" * (MAX_RECORD_BYTES - 19), [("h", b"123456789")])


def test_every_topic_admits_what_the_worker_may_write() -> None:
    specs = topic_specs(Settings())
    assert TOPIC_MAX_MESSAGE_BYTES > MAX_RECORD_BYTES
    assert all(s.config["max.message.bytes"] == str(TOPIC_MAX_MESSAGE_BYTES) for s in specs), specs


def test_a_park_request_refers_to_its_message_without_its_bytes() -> None:
    delivery = Delivery("tool-calls", 3, 17, b"agent", b"x" * 1000)
    reference = Delivery.from_json(delivery.to_json(value=False))
    assert reference.by_reference and reference.size == 1000 and reference.value == b""
    assert reference.message_id == delivery.message_id and reference.key == b"agent"
    small = Delivery.from_json(delivery.to_json())
    assert not small.by_reference and small.value == delivery.value
    big = Delivery("tool-calls", 0, 1, None, b"y" * (1 << 20))
    assert Delivery.from_json(big.to_json()).size == 1 << 20


def _record(size: int) -> object:
    payload = b'{"tool":"pay","arguments":{"blob":"' + b"x" * size + b'"}}'
    return new_record(parse_envelope(payload, message_id="m:0:1"), "pay", origin="test")


def test_a_record_without_room_for_its_later_steps_is_refused_at_park() -> None:
    limit = 200_000
    check_parkable(_record(limit - STEP_ROOM_BYTES - 1000), limit)  # type: ignore[arg-type]
    with pytest.raises(RecordTooLarge):
        check_parkable(_record(limit - STEP_ROOM_BYTES), limit)  # type: ignore[arg-type]


def test_an_outcome_too_large_is_kept_as_a_small_error() -> None:
    running = begin_run(_record(100).model_copy(update={"state": ApprovalState.APPROVED}))  # type: ignore[attr-defined]
    kept = finish_within(running, {"status": "ok", "result": "r"}, 10_000)
    assert kept.reply == {"status": "ok", "result": "r"}
    done = finish_within(running, {"status": "ok", "result": "r" * 20_000}, 10_000)
    assert done.state is ApprovalState.DONE and done.reply is not None
    assert done.reply["error"]["kind"] == "RecordTooLarge"
    assert len(done.to_bytes()) < 10_000


class _Recorder:
    """Stands in for the engine's Sender: keeps what would be sent."""

    exactly_once = False

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes, dict[str, bytes]]] = []

    async def send(
        self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]
    ) -> None:
        check_size(topic, key, value, headers)
        self.sent.append((topic, key, value, dict(headers)))


def _dead_letter(delivery: Delivery) -> tuple[str, bytes | None, bytes, dict[str, bytes]]:
    from stream_adapter.stream.outputs import Outputs

    recorder = _Recorder()
    outputs = Outputs(recorder, replies="r", dlq="dlq", requests="q")  # type: ignore[arg-type]
    asyncio.run(outputs.dead_letter(delivery, RecordTooLarge("too big"), attempts=1))
    return recorder.sent[0]


def test_a_dead_letter_copies_the_original_when_it_fits() -> None:
    _, key, value, headers = _dead_letter(Delivery("tool-calls", 0, 5, b"k", b"{}"))
    assert (key, value) == (b"k", b"{}") and "original" not in headers


def test_a_dead_letter_too_large_to_copy_goes_by_reference() -> None:
    big = Delivery("tool-calls", 1, 9, b"k" * 5000, b"v" * (MAX_RECORD_BYTES - 100))
    _, key, value, headers = _dead_letter(big)
    assert key is None and value == b""
    assert headers["original"] == b"by-reference"
    assert headers["original-bytes"] == str(MAX_RECORD_BYTES - 100).encode()
    assert headers["source-offset"] == b"9" and headers["message-id"] == b"tool-calls:1:9"
    reference = Delivery.from_json(
        Delivery("tool-calls", 2, 3, b"k", b"x" * 10).to_json(value=False)
    )
    _, key, value, headers = _dead_letter(reference)
    assert key == b"k" and value == b"" and headers["original-bytes"] == b"10"
