"""A bench run's figures over interleaved rounds: each figure and each ratio as the median of
its per-round values, with their min and max.

A ratio is taken within each round, then summarised: both sides of it ran minutes apart at
most, so a drift of the machine's speed between rounds moves both.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stream_adapter_dev.bench.measure import Latency, Result

Rounds = Sequence[Sequence[Result]]


@dataclass(frozen=True, slots=True)
class Spread:
    """The median of per-round values, with their min and max."""

    median: float
    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        got = list(values)
        if not got:
            raise ValueError("a spread of no values")
        return cls(statistics.median(got), min(got), max(got), len(got))

    def show(self, fmt: str = ",.0f") -> str:
        """`median (low-high)`, or the one value of a single round."""
        if self.rounds == 1:
            return format(self.median, fmt)
        return f"{self.median:{fmt}} ({self.low:{fmt}}-{self.high:{fmt}})"


@dataclass(frozen=True, slots=True)
class RateSpread:
    """One contender's latency at one paced rate, over the rounds."""

    rate: float
    p50_ms: Spread
    p99_ms: Spread
    max_ms: Spread


def _by_name(rounds: Rounds) -> list[dict[str, Result]]:
    return [{r.name: r for r in one} for one in rounds]


def names(rounds: Rounds) -> list[str]:
    """Contenders in the order they ran in."""
    seen: dict[str, None] = {}
    for one in rounds:
        for r in one:
            seen.setdefault(r.name, None)
    return list(seen)


def throughput(rounds: Rounds) -> dict[str, Spread]:
    """Calls/s of each contender over the rounds it ran in."""
    by = _by_name(rounds)
    return {n: Spread.of(r[n].calls_per_s for r in by if n in r) for n in names(rounds)}


def ratios(rounds: Rounds, pairs: Sequence[tuple[str, str]]) -> dict[str, Spread]:
    """`a / b` throughput for each pair, per round where both ran; and each contender with
    an ideal against it."""
    by = _by_name(rounds)
    out: dict[str, Spread] = {}
    for a, b in pairs:
        values = [r[a].calls_per_s / r[b].calls_per_s for r in by if a in r and b in r]
        if values:
            out[f"{a} / {b}"] = Spread.of(values)
    for n in names(rounds):
        ideal = [
            r[n].calls_per_s / limit
            for r in by
            if n in r and (limit := r[n].ideal_per_s or 0.0) > 0
        ]
        if ideal:
            out[f"{n} / ideal"] = Spread.of(ideal)
    return out


def latency(rounds: Rounds) -> dict[str, list[RateSpread]]:
    """Each contender's latency by paced rate (the same rates in every round)."""
    by = _by_name(rounds)
    out: dict[str, list[RateSpread]] = {}
    for n in names(rounds):
        runs = [r[n].latency for r in by if n in r and r[n].latency]
        if not runs:
            continue
        out[n] = [
            _rate_spread([run[i] for run in runs if i < len(run)]) for i in range(len(runs[0]))
        ]
    return out


def _rate_spread(points: list[Latency]) -> RateSpread:
    return RateSpread(
        points[0].rate,
        Spread.of(p.p50_ms for p in points),
        Spread.of(p.p99_ms for p in points),
        Spread.of(p.max_ms for p in points),
    )


def p99_ratios(
    rounds: Rounds, pairs: Sequence[tuple[str, str]]
) -> dict[str, list[tuple[float, Spread]]]:
    """`a / b` p99 at each rate both were paced at, per round, for each pair."""
    by = _by_name(rounds)
    out: dict[str, list[tuple[float, Spread]]] = {}
    for a, b in pairs:
        rows: list[tuple[float, Spread]] = []
        both = [(r[a].latency, r[b].latency) for r in by if a in r and b in r]
        if not both or not both[0][0]:
            continue
        for i, point in enumerate(both[0][0]):
            values = [
                la[i].p99_ms / lb[i].p99_ms
                for la, lb in both
                if i < len(la) and i < len(lb) and la[i].rate == lb[i].rate and lb[i].p99_ms > 0
            ]
            if values:
                rows.append((point.rate, Spread.of(values)))
        if rows:
            out[f"{a} / {b}"] = rows
    return out
