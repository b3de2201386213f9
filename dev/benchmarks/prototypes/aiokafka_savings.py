"""Prototype of option (c), what the aiokafka path can still give: the worker with the top
saving of the per-call profile that keeps every check, installed before it starts.

- `_to_message`: Faust builds each record's ConsumerMessage through a keyword-argument
  `__init__` that measures key and value again and converts the timestamp (about 0.9 us
  a call in the profile). Here the message is filled slot by slot from the fetched record,
  the sizes taken from the record (aiokafka measured them already). Same attributes, same
  values.

Throwaway quality: written against faust-streaming 0.15.3 only. Run as the worker:
``python -m benchmarks.prototypes.aiokafka_savings`` in dev/, with the worker's environment.
"""

from __future__ import annotations

import sys
from typing import Any


def install() -> None:
    from faust.types.tuples import ConsumerMessage

    from stream_adapter.stream.engine.consumer import FastConsumer

    new = object.__new__

    def _to_message(self: Any, tp: Any, record: Any) -> Any:
        m = new(ConsumerMessage)
        m.topic = record.topic
        m.partition = record.partition
        m.offset = record.offset
        ts = record.timestamp
        m.timestamp = ts / 1000.0 if ts is not None else None
        m.timestamp_type = record.timestamp_type
        m.headers = record.headers
        m.key = record.key
        m.value = record.value
        m.checksum = record.checksum
        m.serialized_key_size = record.serialized_key_size
        m.serialized_value_size = record.serialized_value_size
        m.acked = False
        m.refcount = 0
        m.tp = tp
        m.tracked = False  # ConsumerMessage.use_tracking is True
        m.time_in = m.time_out = m.time_total = None
        m.generation_id = self.app.consumer_generation_id
        return m

    FastConsumer._to_message = _to_message  # type: ignore[method-assign]


def main() -> None:
    install()
    sys.argv = ["stream-adapter", "worker"]
    from stream_adapter.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
