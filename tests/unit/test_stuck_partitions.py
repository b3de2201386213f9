"""A batch that cannot be decoded or a partition's fetch error stays with its partition:
records before it are handed on, the partition is set aside at the bad offset and rests."""

from __future__ import annotations

import aiokafka.codec
import pytest
from aiokafka.consumer.fetcher import READ_UNCOMMITTED, FetchError, FetchResult, PartitionRecords
from aiokafka.errors import TopicAuthorizationFailedError
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

from stream_adapter.stream.engine.stuck import StuckPartitions
from stream_adapter.stream.web import health_text

TP = TopicPartition("tool-calls", 3)
OTHER = TopicPartition("tool-calls", 0)


def _batch(codec: int, first: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for offset in range(first, first + count):
        builder.append(offset, timestamp=None, key=b"k", value=b"v%d" % offset, headers=[])
    return bytes(builder.build())


def _result(raw: bytes, tp: TopicPartition = TP) -> FetchResult:
    records = PartitionRecords(tp, MemoryRecords(raw), None, 0, None, None, True, READ_UNCOMMITTED)
    return FetchResult(tp, assignment=None, partition_records=records, backoff=0)


def test_records_before_an_undecodable_batch_are_handed_on_and_the_rest_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = _batch(DefaultRecordBatch.CODEC_GZIP, 0, 2) + _batch(DefaultRecordBatch.CODEC_ZSTD, 2, 2)
    monkeypatch.setattr(aiokafka.codec, "has_zstd", lambda: False)
    stuck = StuckPartitions(retry_s=60)
    result = _result(raw)
    fetched = {TP: result}
    stuck.guard(fetched, None)
    handed_on = [record.offset for record in result._partition_records]
    stuck.settle(lambda tp: -1)
    assert handed_on == [0, 1]
    [part] = list(stuck)
    assert (part.topic, part.partition, part.offset) == ("tool-calls", 3, 2)
    assert part.error_kind == "UnsupportedCodecError"
    assert stuck.resting() == {TP}
    assert "tool-calls partition 3 at offset 2: UnsupportedCodecError" in health_text(list(stuck))


def test_a_fetch_error_is_taken_out_and_set_aside_at_the_position() -> None:
    stuck = StuckPartitions()
    fine = _result(_batch(DefaultRecordBatch.CODEC_NONE, 0, 1), OTHER)
    fetched = {TP: FetchError(error=TopicAuthorizationFailedError("t"), backoff=0), OTHER: fine}
    stuck.guard(fetched, {TP, OTHER})
    stuck.settle(lambda tp: 41)
    assert list(fetched) == [OTHER]  # the error is not raised for every partition
    assert [(p.partition, p.offset, p.error_kind) for p in stuck] == [
        (3, 41, "TopicAuthorizationFailedError")
    ]


def test_a_partition_that_hands_on_records_again_or_moves_away_is_no_longer_stuck() -> None:
    stuck = StuckPartitions()
    stuck.set_aside(TP, 7, ValueError())
    stuck.set_aside(OTHER, 9, ValueError())
    stuck.served({TP: []})
    assert [p.partition for p in stuck] == [0]
    stuck.forget({OTHER})
    assert not list(stuck) and not stuck.resting()
    assert health_text([]) == "ok\n"


def test_unwanted_partitions_are_left_alone() -> None:
    stuck = StuckPartitions()
    error = FetchError(error=TopicAuthorizationFailedError("t"), backoff=0)
    fetched = {TP: error}
    stuck.guard(fetched, {OTHER})
    stuck.settle(lambda tp: 0)
    assert fetched == {TP: error} and not list(stuck)
