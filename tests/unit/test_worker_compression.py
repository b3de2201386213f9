"""The worker's replies are compressed as COMPRESSION says, on every route to the broker: the
inline lane's whole batches too, which it builds itself."""

from __future__ import annotations

from types import SimpleNamespace

import cramjam
import pytest
from aiokafka.record.default_records import DefaultRecordBase, DefaultRecordBatch
from aiokafka.record.memory_records import MemoryRecords

from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.settings import Settings
from stream_adapter.stream.engine import BatchSender, compression, patches
from stream_adapter.stream.engine.connection import faust_connection


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_the_inline_lanes_batches_use_the_producers_codec(codec: str) -> None:
    settings = Settings.model_validate({"compression": codec})
    producer = kafka_clients.producer(settings)  # not started: no broker needed to build
    app = SimpleNamespace(producer=SimpleNamespace(_ensure_producer=lambda: producer))
    batch = BatchSender(app).batch(1 << 16)
    assert batch.append(b"run-1", b'{"status": "ok", "pad": "' + b"x" * 200 + b'"}', [])
    raw = bytes(batch._builder._builder.build())
    built = MemoryRecords(raw).next_batch()
    assert built is not None
    assert built.compression_type == getattr(DefaultRecordBatch, f"CODEC_{codec.upper()}")
    assert [r.key for r in built] == [b"run-1"]


def test_faust_gets_the_compression_and_the_credentials() -> None:
    settings = Settings.model_validate(
        {
            "compression": "zstd",
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_username": "adapter",
            "sasl_password": "pw",
        }
    )
    options = faust_connection(
        kafka_clients.client_options(settings), kafka_clients.compression_type(settings)
    )
    assert options["producer_compression_type"] == "zstd"
    credentials = options["broker_credentials"]
    assert credentials.username == "adapter" and credentials.mechanism.value == "SCRAM-SHA-256"
    assert "pw" not in repr(credentials)
    none = Settings.model_validate({"compression": "none"})
    options = kafka_clients.client_options(none)
    plain = faust_connection(options, kafka_clients.compression_type(none))
    assert plain == {"producer_compression_type": None}


def _lz4_batch_frame(values: list[bytes]) -> bytes:
    """The lz4 frame of a batch of values as the inline lane builds it."""
    settings = Settings.model_validate({"compression": "lz4"})
    producer = kafka_clients.producer(settings)
    app = SimpleNamespace(producer=SimpleNamespace(_ensure_producer=lambda: producer))
    batch = BatchSender(app).batch(1 << 20)
    for value in values:
        assert batch.append(b"run-1", value, [])
    raw = bytes(batch._builder._builder.build())
    assert [r.value for r in MemoryRecords(raw).next_batch()] == values  # type: ignore[union-attr]
    return raw[DefaultRecordBase.HEADER_STRUCT.size :]


def _lz4_frame(data: bytes, level: int) -> bytes:
    compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


async def test_lz4_batches_are_written_in_lz4s_fast_mode() -> None:
    patches.install()
    values = [b'{"status": "ok", "i": %d, "pad": "%s"}' % (i, b"ab" * (i % 50)) for i in range(300)]
    frame = _lz4_batch_frame(values)
    records = bytes(cramjam.lz4.decompress(frame))
    assert frame == _lz4_frame(records, compression.LZ4_LEVEL)
    assert frame != _lz4_frame(records, 9)  # aiokafka's own level: LZ4HC
