"""The compression codecs Kafka batches come in, checked once per process before any client runs.

Any producer may compress with gzip, snappy, lz4 or zstd, and a consumer that cannot decode a
batch cannot move past it. aiokafka decodes snappy, lz4 and zstd through `cramjam`, an ordinary
dependency of this package; the check builds and reads back one real record batch per codec,
through the same code the clients use, so a broken install fails at start with one line.
"""

from __future__ import annotations

import functools

from stream_adapter.core.errors import CodecUnavailable

CODECS = ("gzip", "snappy", "lz4", "zstd")
"""Every codec Kafka defines, by the name clients and `COMPRESSION` use."""

_SAMPLE = b'{"tool": "echo", "arguments": {"text": "' + b"codec check " * 64 + b'"}}'


def roundtrip(codec: str) -> None:
    """Encode one record batch with codec and decode it again; CodecUnavailable on failure."""
    from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from aiokafka.record.memory_records import MemoryRecords

    code = getattr(DefaultRecordBatch, f"CODEC_{codec.upper()}", None)
    if code is None:
        raise CodecUnavailable(f"unknown compression codec {codec!r}; one of {', '.join(CODECS)}")
    try:
        builder = DefaultRecordBatchBuilder(2, code, 0, -1, -1, -1, 1 << 20)
        builder.append(0, timestamp=None, key=b"k", value=_SAMPLE, headers=[])
        batch = MemoryRecords(bytes(builder.build())).next_batch()
        values = [record.value for record in batch] if batch is not None else []
    except Exception as exc:
        cause = str(exc) if type(exc).__name__ in str(exc) else f"{type(exc).__name__}: {exc}"
        raise CodecUnavailable(
            f"the {codec} codec does not work in this install ({cause}); "
            "reinstall stream-adapter with its dependencies (cramjam)"
        ) from None
    if values != [_SAMPLE]:
        raise CodecUnavailable(f"the {codec} codec did not give back what it was given")


@functools.cache
def check_codecs() -> None:
    """Round-trip every codec once per process; CodecUnavailable names the first that fails."""
    for codec in CODECS:
        roundtrip(codec)
