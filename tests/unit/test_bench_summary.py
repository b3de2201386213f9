"""The bench's summary: medians of per-round figures and of per-round ratios, with min-max."""

from __future__ import annotations

import pytest

from stream_adapter_dev.bench.measure import Latency, Result
from stream_adapter_dev.bench.summary import Spread, latency, p99_ratios, ratios, throughput


def _r(name: str, per_s: float, p99s: tuple[float, ...] = (), ideal: float | None = None) -> Result:
    lat = tuple(Latency(1000.0 * (i + 1), p / 2, p, p * 2) for i, p in enumerate(p99s))
    return Result(name, 100, per_s, lat, 1.0, ideal)


def test_a_ratio_is_the_median_of_per_round_ratios_not_the_ratio_of_medians() -> None:
    # The machine drifts: round 2 is slow for both. Per round, a is 0.5, 0.5, 0.9 of b.
    rounds = [
        [_r("a", 50, (10,)), _r("b", 100, (20,))],
        [_r("a", 10, (40,)), _r("b", 20, (20,))],
        [_r("a", 90, (30,)), _r("b", 100, (10,))],
    ]
    got = ratios(rounds, [("a", "b")])["a / b"]
    assert got == Spread(0.5, 0.5, 0.9, 3)
    # The ratio of the medians (50 / 100) would happen to agree here; shuffle b to part them.
    rounds[0][1] = _r("b", 60, (20,))
    assert ratios(rounds, [("a", "b")])["a / b"].median == pytest.approx(50 / 60)
    assert throughput(rounds)["b"] == Spread(60, 20, 100, 3)
    p99 = p99_ratios(rounds, [("a", "b")])["a / b"]
    assert p99 == [(1000.0, Spread(2.0, 0.5, 3.0, 3))]


def test_latency_by_rate_and_ideals_over_the_rounds() -> None:
    rounds = [
        [_r("w", 10, (5, 7)), _r("s", 90, ideal=100)],
        [_r("w", 10, (6, 9)), _r("s", 95, ideal=100)],
    ]
    curve = latency(rounds)["w"]
    assert [p.rate for p in curve] == [1000.0, 2000.0]
    assert curve[1].p99_ms == Spread(8.0, 7.0, 9.0, 2)
    assert "s" not in latency(rounds)
    assert ratios(rounds, [])["s / ideal"] == Spread(0.925, 0.9, 0.95, 2)


def test_a_pair_missing_from_a_round_counts_only_where_both_ran() -> None:
    rounds = [[_r("a", 10), _r("b", 20)], [_r("a", 30)]]
    assert ratios(rounds, [("a", "b")])["a / b"] == Spread(0.5, 0.5, 0.5, 1)
    assert Spread(0.5, 0.5, 0.5, 1).show(".2f") == "0.50"
    assert Spread(2, 1, 3, 3).show() == "2 (1-3)"
    with pytest.raises(ValueError):
        Spread.of([])
