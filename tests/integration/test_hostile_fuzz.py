"""A short hostile fuzz run (`stream-adapter fuzz --hostile`, docs/chaos.md) at each guarantee:
sizes at and around every limit, reused ids, re-keyed and replayed decisions, floods of
identical calls. No partition stalls, no call goes unanswered, and every answer is the
contract's."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_adapter_dev.chaos.harness import BrokerControl
from stream_adapter_dev.chaos.hostile import HostileOptions, run_hostile

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_hostile_agent_stalls_no_partition_and_gets_the_contracts_answers(
    guarantee: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    options = HostileOptions(guarantee=guarantee, flood=50, max_seconds=240.0, seed=5)
    figures = await run_hostile(options, BrokerControl(kafka_bootstrap), tmp_path / "run")
    summary = figures.to_json()
    assert figures.stalls == 0 and figures.lost_calls == 0, summary
    assert figures.worker_restarts == 0 and figures.final_lag == 0, summary
    assert not figures.by_case, summary
    assert figures.passed, summary
