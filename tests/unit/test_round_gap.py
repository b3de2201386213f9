"""The pause between fetch rounds: a round that follows another at once waits out the rest
of ROUND_GAP_S; one that follows a wait (no records for a while) or a long round does not."""

from __future__ import annotations

import pytest

from stream_adapter.stream.engine.consumer import ROUND_GAP_S, round_gap_left


def test_a_round_right_after_another_waits_out_the_gap() -> None:
    assert round_gap_left(10.0, 10.0) == pytest.approx(ROUND_GAP_S)
    assert round_gap_left(10.0, 10.0 + ROUND_GAP_S / 4) == pytest.approx(ROUND_GAP_S * 3 / 4)


def test_a_round_after_the_gap_has_passed_goes_at_once() -> None:
    assert round_gap_left(10.0, 10.0 + ROUND_GAP_S) == 0.0
    assert round_gap_left(10.0, 11.0) == 0.0  # a long round, or a fetch that waited for records
