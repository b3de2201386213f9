"""What one bench run measures and where: plain data, light to import (the CLI reads its
defaults from here without loading the bench's Kafka clients)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from stream_adapter.settings import COMMIT_INTERVAL_S


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """What to run and where."""

    bootstrap: str
    calls: int = 100_000
    partitions: int = 8
    out: Path = Path("bench-results")
    skip: frozenset[str] = frozenset()
    paced_s: float = 5.0
    paced_fractions: tuple[float, ...] = (0.25, 0.4, 0.5)
    """Latency runs at these fractions of the worker's measured throughput; the highest is
    the headline figure."""
    warm_paced_s: float = 90.0
    sleep_calls_per_slot: int = 40
    settle_s: float = 60.0
    """Idle time before each contender's backlog, so none runs slowed by the one before it
    (after Quix Streams exactly once, a worker ran slower for up to a minute: docs/bench.md,
    "What the contender before leaves")."""
    rounds: int = 3
    """Every contender runs once per round, in the same order (A B C D, A B C D, ...); each
    figure and ratio is the median of its per-round values, with min and max."""
    quix_eos_intervals_s: tuple[float, ...] = (5.0, COMMIT_INTERVAL_S["exactly_once"])
    """Quix Streams exactly once at these checkpoint intervals: its default, and the
    worker's commit interval."""


def default(name: str) -> Any:
    """A BenchConfig field's default (the CLI's defaults come from here)."""
    for item in fields(BenchConfig):
        if item.name == name:
            return item.default
    raise KeyError(name)
