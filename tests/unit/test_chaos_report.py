"""The chaos run's verdict on approved calls: per tool, how its calls ended and what the ledger
shows. An idempotent tool must end every approved call normally with one effect; no tool may
show two effects for one call. (The runs themselves: tests/integration/test_chaos.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from stream_adapter.chaos.load import APPROVED, EXPECTED, MIX, CallSpec
from stream_adapter.chaos.report import ApprovedTool, ChaosFigures, approved_figures
from topologies.demo import TOOLS, registry


def test_the_mix_s_approved_tools_are_the_demo_s_with_their_idempotence() -> None:
    assert set(MIX) == set(EXPECTED) and set(MIX) <= TOOLS
    confirm = {name for name in MIX if registry.get(name).confirm}
    assert set(APPROVED) == confirm
    assert {name: registry.get(name).idempotent for name in confirm} == APPROVED
    assert set(APPROVED.values()) == {True, False}  # both rules are exercised


def _call(tool: str, n: int) -> CallSpec:
    return CallSpec(tool, {}, f"run-{n}", f"{tool}-{n}")


OK = {"status": "ok"}
UNKNOWN = {"status": "already_done", "outcome": "unknown"}
STORED = {"status": "already_done", "outcome": {"status": "ok"}}


def _figures(
    replies: dict[str, list[dict[str, Any]]], ledger: dict[str, int]
) -> dict[str, ApprovedTool]:
    calls = [_call(tool, n) for tool in ("send_invoice", "wire_funds") for n in range(3)]
    calls.append(_call("echo", 9))
    by_call = {
        c.call_id: [{"status": "pending_approval"}, *replies.get(c.call_id, [OK])] for c in calls
    }
    return approved_figures(calls, by_call, ledger)


def _verdict(approved: dict[str, ApprovedTool]) -> bool:
    return ChaosFigures(
        guarantee="at_least_once",
        reader="read_uncommitted",
        broker="local",
        calls=7,
        duration_s=1.0,
        calls_without_terminal_reply=0,
        approvals_asked_twice=0,
        approved_runs_twice=0,
        approved_outcome_unknown=0,
        duplicate_replies=0,
        duplicate_pending_replies=0,
        duplicate_terminal_replies=0,
        unexpected_outcomes=0,
        final_lag=0,
        worker_kills=0,
        unplanned_worker_exits=0,
        producer_resends=0,
        approved=approved,
    ).passed


ONE_EACH = {f"{tool}-{n}": 1 for tool in ("send_invoice", "wire_funds") for n in range(3)}


def test_every_approved_call_ended_normally_with_one_effect_passes() -> None:
    figures = _figures({"send_invoice-1": [STORED]}, ONE_EACH)
    assert figures["send_invoice"] == ApprovedTool(True, 3, 3, 0, 0, 3, 0)
    assert figures["wire_funds"] == ApprovedTool(False, 3, 3, 0, 0, 3, 0)
    assert _verdict(figures)


def test_a_non_idempotent_call_may_end_unknown_with_no_effect() -> None:
    figures = _figures({"wire_funds-2": [UNKNOWN, OK]}, {**ONE_EACH, "wire_funds-2": 0})
    assert figures["wire_funds"] == ApprovedTool(False, 3, 2, 1, 1, 2, 0)
    assert figures["wire_funds"].ok and _verdict(figures)


@pytest.mark.parametrize(
    ("replies", "ledger", "tool"),
    [
        ({"send_invoice-0": [UNKNOWN]}, ONE_EACH, "send_invoice"),  # idempotent, unknown
        ({}, {**ONE_EACH, "send_invoice-2": 0}, "send_invoice"),  # approved, no effect
        ({}, {**ONE_EACH, "wire_funds-1": 2}, "wire_funds"),  # ran twice
        ({}, {**ONE_EACH, "send_invoice-1": 3}, "send_invoice"),
    ],
)
def test_an_idempotent_unknown_a_missing_effect_or_a_second_one_fails(
    replies: dict[str, list[dict[str, Any]]], ledger: dict[str, int], tool: str
) -> None:
    figures = _figures(replies, ledger)
    assert not figures[tool].ok
    assert not _verdict(figures)
