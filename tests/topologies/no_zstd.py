"""The demo topology in a worker that cannot decode zstd batches, as an install without the
codec would be (the start-up check has passed by the time a topology is imported)."""

from __future__ import annotations

import aiokafka.codec

aiokafka.codec.has_zstd = lambda: False

from topologies.demo import app  # noqa: E402

__all__ = ["app"]
