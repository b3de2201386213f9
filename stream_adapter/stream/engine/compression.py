"""lz4 record batches in LZ4's fast mode, for every producer of the worker's process.

aiokafka compresses lz4 batches with LZ4HC at level 9, the level a broker uses when it
recompresses: on batches of replies about eight times the CPU of fast mode, for 5% fewer bytes,
and the worker's costliest step on a backlog (docs/bench.md, "Compression"). Readers decode
both alike.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

LZ4_LEVEL = 0
"""LZ4 frame compression level: 0 is the LZ4 library's default, its fast (not HC) mode."""


def fast_lz4(own: Callable[..., bytes]) -> Callable[[Any], bytes]:
    """aiokafka's own lz4 encoder (its frame options kept), at LZ4_LEVEL."""
    return functools.partial(own, level=LZ4_LEVEL)
