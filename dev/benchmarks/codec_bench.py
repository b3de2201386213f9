"""CPU and bytes per reply for each compression codec, as the worker's producer batches them.

Builds record batches of real-looking replies with aiokafka's own batch builder (the code the
producer runs) at several batch sizes, then decodes them as a consumer would. Reports CPU
microseconds per reply (process time, so other load on the machine counts less) to encode and
to decode, and bytes per reply on the wire, for each codec; the codecs are interleaved, round
after round, and the median round is reported.

Run: ``python dev/benchmarks/codec_bench.py [--rounds 7] [--replies 20000]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from stream_adapter.stream.engine import patches

CODECS = ("none", "gzip", "snappy", "lz4", "lz4-hc", "zstd")
"""lz4 as the worker writes it (LZ4's fast mode), lz4-hc as aiokafka alone does (LZ4HC level 9)."""
BATCH_SIZES = (1, 8, 64, 600)
"""Replies per batch: one at a time (a quiet worker), a few, many, and a backlog's full batches
(about 270 KB)."""
BUILDER_MODULE = sys.modules[DefaultRecordBatchBuilder.__module__]


def reply(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """Key, value and headers of a reply like the worker's (an echo result)."""
    run_id = f"run-{uuid.UUID(int=i).hex}"
    value = orjson.dumps(
        {
            "status": "ok",
            "tool": "echo",
            "run_id": run_id,
            "call_id": f"call-{uuid.UUID(int=i + 1).hex}",
            "result": {"i": i, "t": 1764561600.0 + i, "pad": "x" * 120},
        }
    )
    headers = [
        ("message-id", f"tool-calls:{i % 8}:{i}".encode()),
        ("content-type", b"application/json"),
    ]
    return run_id.encode(), value, headers


def one_round(
    codec: str, per_batch: int, replies: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]
) -> tuple[float, float, float]:
    """(encode µs, decode µs, bytes) per reply for codec at per_batch replies a batch."""
    code = getattr(DefaultRecordBatch, f"CODEC_{codec.removesuffix('-hc').upper()}")
    fast = BUILDER_MODULE.lz4_encode
    if codec == "lz4-hc":
        BUILDER_MODULE.lz4_encode = patches.original(BUILDER_MODULE, "lz4_encode")
    built = []
    try:
        start = time.process_time()
        for first in range(0, len(replies), per_batch):
            builder = DefaultRecordBatchBuilder(2, code, 0, -1, -1, -1, 1 << 20)
            for offset, (key, value, headers) in enumerate(replies[first : first + per_batch]):
                builder.append(offset, timestamp=None, key=key, value=value, headers=headers)
            built.append(bytes(builder.build()))
        encoded = time.process_time() - start
    finally:
        BUILDER_MODULE.lz4_encode = fast
    start = time.process_time()
    count = 0
    for raw in built:
        batches = MemoryRecords(raw)
        while batches.has_next():
            batch = batches.next_batch()
            assert batch is not None
            count += sum(1 for _ in batch)
    decoded = time.process_time() - start
    assert count == len(replies)
    n = len(replies)
    return encoded / n * 1e6, decoded / n * 1e6, sum(map(len, built)) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--replies", type=int, default=20_000)
    args = parser.parse_args()
    patches.install_fast_lz4()
    replies = [reply(i) for i in range(args.replies)]
    for per_batch in BATCH_SIZES:
        rounds: dict[str, list[tuple[float, float, float]]] = {c: [] for c in CODECS}
        for _ in range(args.rounds):
            for codec in CODECS:  # interleaved: drift on the machine hits every codec alike
                rounds[codec].append(one_round(codec, per_batch, replies))
        print(
            f"\n{per_batch} repl{'y' if per_batch == 1 else 'ies'} a batch "
            f"(median of {args.rounds} rounds, min-max of encode)"
        )
        print(f"{'codec':8} {'encode µs':>10} {'decode µs':>10} {'bytes':>7}  encode min-max")
        for codec in CODECS:
            enc = [r[0] for r in rounds[codec]]
            dec = [r[1] for r in rounds[codec]]
            size = rounds[codec][0][2]
            print(
                f"{codec:8} {statistics.median(enc):10.2f} {statistics.median(dec):10.2f} "
                f"{size:7.0f}  {min(enc):.2f}-{max(enc):.2f}"
            )


if __name__ == "__main__":
    main()
