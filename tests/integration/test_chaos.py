"""CI-sized chaos and fuzz runs (the full ones: `stream-adapter chaos|fuzz`, docs/chaos.md).

Chaos: 300 calls, two worker SIGKILLs, each while an approved call runs (one of send_invoice,
idempotent, one of wire_funds, not), a SIGSTOP past the session timeout while wire_funds runs,
a network partition of the worker running a wire_funds call (its proxy blackholed past the
session timeout, then healed), one broker kill and restart, scaling 1 -> 2 -> 1, in both
processing modes, and no duplicate reply for a read_committed reader in exactly-once mode.
The approved calls of the idempotent tool all end normally, those cut off by a kill too (run
again, one effect each), the other tool's calls cut off end `unknown`, no approved call runs
twice, none is left in the dark, no owner's table disagrees with the changelog, and no run
starts in a process that did not own its partition. Fuzz: a few hundred malformed calls and
decisions among valid ones. They run their own broker, since the chaos run kills it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stream_adapter_dev.broker import local
from stream_adapter_dev.chaos.fuzz import FuzzOptions, run_fuzz
from stream_adapter_dev.chaos.harness import BrokerControl, chaos_broker_config
from stream_adapter_dev.chaos.scenario import ChaosOptions, run_chaos
from tests.harness import ROOT

pytestmark = pytest.mark.timeout(600)  # the exactly-once run may take its 480 s


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerControl]:
    config = chaos_broker_config(tmp_path_factory.mktemp("chaos-kafka"), ROOT / ".kafka" / "libs")
    broker = BrokerControl(local.start(config), config)
    yield broker
    local.stop(config)


def _small(guarantee: str) -> ChaosOptions:
    return ChaosOptions(
        calls=300,
        rate=60.0,
        kills=0,  # the two kill-while-running faults are the worker kills
        running_kills=("send_invoice", "wire_funds"),
        running_pauses=("wire_funds",),
        running_net_partitions=("wire_funds",),
        tool_latency_s=0.4,
        guarantee=guarantee,
        partitions=4,
        session_timeout_s=6.0,  # the broker's group.min.session.timeout.ms
        broker_down_s=1.0,
        # Exactly-once recovery waits for fenced transactions (up to 30 s a rebalance); a run
        # with an extra crash and rebalance needed more than 300 s once in CI.
        max_seconds=300.0 if guarantee == "at_least_once" else 480.0,
        recover_timeout_s=90.0,
        seed=11,
    )


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_chaos_loses_nothing(
    guarantee: str, own_broker: BrokerControl, tmp_path: Path
) -> None:
    figures = await run_chaos(_small(guarantee), own_broker, tmp_path / "run")
    summary = figures.to_json()
    assert figures.calls_without_terminal_reply == 0, summary
    assert figures.approvals_asked_twice == 0, summary
    assert figures.approved_runs_twice == 0, summary
    # A worker paused past the session timeout during a wire_funds run wakes as a zombie:
    # no call is left without a final reply and without a person asked.
    assert figures.worker_pauses == 1 and figures.calls_in_the_dark == 0, summary
    # ...and so does one cut off from the broker, alive: no owner's table disagrees with the
    # changelog, and no run started in a process that did not own its partition then.
    assert figures.worker_partitions == 1, summary
    assert figures.table_disagreements == 0 and figures.runs_by_non_owner == 0, summary
    assert figures.final_lag == 0, summary
    assert figures.unexpected_outcomes == 0, summary
    # Idempotent approved calls all end normally, one ledger effect each; none runs twice.
    invoices, wires = figures.approved["send_invoice"], figures.approved["wire_funds"]
    assert invoices.idempotent and not wires.idempotent
    assert invoices.approved > 0 and wires.approved > 0, summary
    assert invoices.ended_unknown == 0 and invoices.effects_one == invoices.approved, summary
    assert wires.effects_more == 0, summary
    # Each planned kill found a run of its tool going and cut it off; the calls cut off ended as
    # their tool's rule says.
    for tool in ("send_invoice", "wire_funds"):
        killed = figures.killed[tool]
        assert killed.planned == 1 and killed.missed == 0, summary
        assert killed.kills_landed >= 1 and killed.calls_cut >= 1, summary
        assert killed.effects_more == 0, summary
    cut_invoices, cut_wires = figures.killed["send_invoice"], figures.killed["wire_funds"]
    assert cut_invoices.ended_normally == cut_invoices.calls_cut == cut_invoices.effects_one, (
        summary
    )
    assert cut_wires.ended_unknown == cut_wires.calls_cut, summary
    assert wires.ended_unknown >= cut_wires.calls_cut, summary
    assert figures.passed, summary
    assert figures.worker_kills == 2
    kinds = [f.kind for f in figures.faults]
    assert kinds.count("broker restart") == 1 and "scale-up 1->2" in kinds, kinds
    assert {"SIGKILL while send_invoice runs", "SIGKILL while wire_funds runs"} <= set(kinds)
    assert "SIGSTOP while wire_funds runs" in kinds
    assert "partitioned while wire_funds runs" in kinds
    assert all(f.recover_s is not None for f in figures.faults), summary
    if guarantee == "exactly_once":
        # contract §8: a read_committed reader sees each reply once (docs/chaos.md).
        assert figures.duplicate_replies == 0, summary


async def test_fuzz_answers_every_bad_message_once(
    own_broker: BrokerControl, tmp_path: Path
) -> None:
    options = FuzzOptions(calls=400, decisions=80, max_seconds=180.0, seed=3)
    figures = await run_fuzz(options, own_broker, tmp_path / "run")
    summary = figures.to_json()
    assert figures.passed, summary
    assert figures.oversized_calls >= 1 and figures.jobs_crashed == 0, summary
