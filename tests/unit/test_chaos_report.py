"""The chaos run's verdict on approved calls: per tool, how its calls ended and what the ledger
shows. An idempotent tool must end every approved call normally with one effect; no tool may
show two effects for one call. The kills that landed while an approved tool ran: per tool, the
runs cut off and how their calls ended; a kill planned while a tool runs that cut off none of
its runs fails the run. (The runs themselves: tests/integration/test_chaos.py.)"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stream_adapter_dev.chaos.load import APPROVED, EXPECTED, MIX, CallSpec
from stream_adapter_dev.chaos.report import (
    ApprovedTool,
    ChaosFigures,
    DuplicateExample,
    KilledRun,
    KilledTool,
    ReplyCopy,
    WorkerKill,
    approved_figures,
    duplicate_examples,
    killed_figures,
)
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


def _chaos_figures(
    approved: dict[str, ApprovedTool],
    killed: dict[str, KilledTool] | None = None,
    *,
    guarantee: str = "at_least_once",
    duplicates: int = 0,
) -> ChaosFigures:
    return ChaosFigures(
        guarantee=guarantee,
        reader="read_uncommitted",
        broker="local",
        calls=7,
        duration_s=1.0,
        calls_without_terminal_reply=0,
        approvals_asked_twice=0,
        approved_runs_twice=0,
        approved_outcome_unknown=0,
        duplicate_replies=duplicates,
        duplicate_pending_replies=0,
        duplicate_terminal_replies=duplicates,
        unexpected_outcomes=0,
        final_lag=0,
        worker_kills=0,
        unplanned_worker_exits=0,
        producer_resends=0,
        approved=approved,
        killed=killed or {},
    )


def _verdict(approved: dict[str, ApprovedTool]) -> bool:
    return _chaos_figures(approved).passed


def _passes(killed: dict[str, KilledTool]) -> bool:
    return _chaos_figures(_figures({}, ONE_EACH), killed).passed


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


def test_a_duplicate_reply_fails_an_exactly_once_run_only() -> None:
    approved = _figures({}, ONE_EACH)
    assert _chaos_figures(approved, duplicates=3).passed  # at least once they are expected
    assert _chaos_figures(approved, guarantee="exactly_once").passed
    assert not _chaos_figures(approved, guarantee="exactly_once", duplicates=1).passed


# The kills that landed while an approved tool ran (report.killed_figures).

BEFORE, AFTER = False, True  # the call's effect was in the ledger when its worker died


def _kill(planned: str | None, *cut: tuple[str, str, bool]) -> WorkerKill:
    return WorkerKill(
        "kill",
        "w1" if cut or planned is None else "",
        planned,
        tuple(KilledRun(tool, call_id, effect) for tool, call_id, effect in cut),
    )


def _killed(
    kills: list[WorkerKill], replies: dict[str, list[dict[str, Any]]], ledger: dict[str, int]
) -> dict[str, KilledTool]:
    calls = [f"{tool}-{n}" for tool in ("send_invoice", "wire_funds") for n in range(3)]
    by_call = {c: [{"status": "pending_approval"}, *replies.get(c, [OK])] for c in calls}
    return killed_figures(kills, by_call, ledger)


def test_kills_landed_count_per_tool_with_the_runs_cut_and_how_their_calls_ended() -> None:
    kills = [
        # planned for send_invoice: cut one invoice before its effect, and a wire after its own
        _kill(
            "send_invoice",
            ("send_invoice", "send_invoice-0", BEFORE),
            ("wire_funds", "wire_funds-0", AFTER),
        ),
        # planned for wire_funds: cut one before its effect
        _kill("wire_funds", ("wire_funds", "wire_funds-1", BEFORE)),
        # an unplanned kill cutting the same invoice again (its rerun), after the effect
        _kill(None, ("send_invoice", "send_invoice-0", AFTER)),
        _kill(None),  # an unplanned kill that cut nothing
    ]
    replies = {"wire_funds-0": [UNKNOWN], "wire_funds-1": [UNKNOWN], "send_invoice-0": [STORED]}
    figures = _killed(kills, replies, {**ONE_EACH, "wire_funds-1": 0})
    assert figures["send_invoice"] == KilledTool(
        idempotent=True,
        planned=1,
        missed=0,
        kills_landed=2,
        runs_cut=2,
        runs_cut_after_effect=1,
        calls_cut=1,
        ended_normally=1,
        ended_unknown=0,
        effects_none=0,
        effects_one=1,
        effects_more=0,
    )
    assert figures["wire_funds"] == KilledTool(
        idempotent=False,
        planned=1,
        missed=0,
        kills_landed=2,
        runs_cut=2,
        runs_cut_after_effect=1,
        calls_cut=2,
        ended_normally=0,
        ended_unknown=2,
        effects_none=1,
        effects_one=1,
        effects_more=0,
    )
    assert all(t.ok for t in figures.values())  # wire_funds may end unknown, with or without
    assert _passes(figures)


@pytest.mark.parametrize(
    ("kills", "replies", "ledger", "tool"),
    [
        # the planned kill found no running invoice at all
        ([WorkerKill("kill", "", "send_invoice")], {}, ONE_EACH, "send_invoice"),
        # it killed, but the run it aimed at ended first: only a wire was cut off
        (
            [_kill("send_invoice", ("wire_funds", "wire_funds-2", BEFORE))],
            {},
            ONE_EACH,
            "send_invoice",
        ),
        ([_kill("wire_funds")], {}, ONE_EACH, "wire_funds"),
        # an idempotent call cut off that ended unknown, or without its effect
        (
            [_kill("send_invoice", ("send_invoice", "send_invoice-1", BEFORE))],
            {"send_invoice-1": [UNKNOWN]},
            ONE_EACH,
            "send_invoice",
        ),
        (
            [_kill("send_invoice", ("send_invoice", "send_invoice-1", BEFORE))],
            {},
            {**ONE_EACH, "send_invoice-1": 0},
            "send_invoice",
        ),
        # a non-idempotent call cut off that ended normally: only a second run could answer so
        ([_kill("wire_funds", ("wire_funds", "wire_funds-1", BEFORE))], {}, ONE_EACH, "wire_funds"),
        # a non-idempotent call cut off that ran twice
        (
            [_kill("wire_funds", ("wire_funds", "wire_funds-1", AFTER))],
            {"wire_funds-1": [UNKNOWN]},
            {**ONE_EACH, "wire_funds-1": 2},
            "wire_funds",
        ),
    ],
)
def test_a_planned_kill_that_cut_none_of_its_tool_or_a_bad_ending_fails(
    kills: list[WorkerKill],
    replies: dict[str, list[dict[str, Any]]],
    ledger: dict[str, int],
    tool: str,
) -> None:
    figures = _killed(kills, replies, ledger)
    assert not figures[tool].ok
    assert not _passes(figures)


def test_the_missed_planned_kills_are_summed_over_tools() -> None:
    kills = [WorkerKill("kill", "", "send_invoice"), _kill("wire_funds")]
    killed = _killed(kills, {}, ONE_EACH)
    assert [killed[t].missed for t in ("send_invoice", "wire_funds")] == [1, 1]
    assert _chaos_figures(_figures({}, ONE_EACH), killed).planned_running_kills_missed == 2


def test_duplicate_examples_list_each_reply_of_a_call_answered_twice_with_its_place() -> None:
    calls = [_call("echo", 1), _call("send_invoice", 2), _call("echo", 3)]
    by_call = {
        "echo-1": [OK],
        "send_invoice-2": [{"status": "pending_approval"}, OK],
        "echo-3": [OK, OK],
    }
    places = {
        "echo-1": [(0, 5, 10_100)],
        "send_invoice-2": [(1, 7, 10_200), (1, 9, 11_000)],
        "echo-3": [(2, 3, 12_000), (2, 40, 12_250)],
    }
    examples = duplicate_examples(calls, by_call, places, 10_000)
    assert examples == [
        DuplicateExample(
            "echo-3", "echo", [ReplyCopy("ok", 2, 3, 2.0), ReplyCopy("ok", 2, 40, 2.25)]
        )
    ]
    asked_twice = {"send_invoice-2": [{"status": "pending_approval"}] * 2 + [OK]}
    assert [e.call_id for e in duplicate_examples(calls, asked_twice, {}, 0)] == ["send_invoice-2"]
    many = [_call("echo", n) for n in range(12)]
    twice = {c.call_id: [OK, OK] for c in many}
    assert len(duplicate_examples(many, twice, {}, 0)) == 10


def _changelog_entry(call_id: str, state: str | None, runs: int = 1) -> Any:
    from types import SimpleNamespace

    key = f"appr-{call_id}".encode()
    if state is None:
        return SimpleNamespace(key=key, value=None)
    record = {"approval_id": key.decode(), "call_id": call_id, "state": state, "runs": runs}
    return SimpleNamespace(key=key, value=orjson.dumps(record))


def test_a_call_is_in_the_dark_without_a_final_reply_unless_its_record_is_unknown() -> None:
    from stream_adapter_dev.chaos.report import in_the_dark

    unknown_reply = {"status": "already_done", "outcome": "unknown"}
    changelog = [
        _changelog_entry("answered", "done"),
        _changelog_entry("listed", "unknown"),
        # The fault a paused worker made: `done` over the owner's `unknown`, no reply.
        _changelog_entry("zombie", "unknown"),
        _changelog_entry("zombie", "done"),
        _changelog_entry("lost", "running"),
        _changelog_entry("never_ran", "pending", runs=0),
        _changelog_entry("removed", "done"),
        _changelog_entry("removed", None),
    ]
    replies = {
        "answered": [{"status": "ok"}],
        "listed": [unknown_reply],
        "zombie": [unknown_reply],
    }
    assert sorted(in_the_dark(changelog, replies)) == ["lost", "zombie"]
