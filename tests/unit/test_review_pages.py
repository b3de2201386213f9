"""What the review pages show, without a broker: tools against their schema, identical calls,
search and pages of 50, one time format, an approval's history, its own page and where a
decision form sends the reviewer back. (The browser tests drive the same pages for real.)"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import pytest
from aiohttp import test_utils, web
from pydantic import Field

import topologies.demo
from stream_adapter.commands.tools import topology_tools
from stream_adapter.core.approvals import ApprovalRecord, ApprovalState
from stream_adapter.core.tools import ToolRegistry
from stream_adapter.review import listing, pages
from stream_adapter.review import web as web_routes
from stream_adapter.review.auth import ReviewersFile, Sessions
from stream_adapter.review.catalog import (
    Catalog,
    catalog_of,
    describe_tool,
    load_catalog,
    unit_of,
)
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.listing import (
    PAGE_SIZE,
    TWINS_SHOWN,
    IdenticalCalls,
    Twins,
    matches,
    page_of,
)
from stream_adapter.review.view import ApprovalsView, Seen
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import Settings
from topologies.demo import TOOLS

Http = test_utils.TestClient[web.Request, web.Application]
TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")


def record(n: int = 0, **changes: Any) -> ApprovalRecord:
    data: dict[str, Any] = {
        "approval_id": f"appr_{n:04d}",
        "tool": "send_invoice",
        "arguments": {"customer": f"customer-{n}", "amount_cents": 1250},
        "run_id": f"run-{n}",
        "call_id": f"call-{n}",
        "origin": "kafka:t",
        "requested_at": f"2024-01-01T00:{n // 60:02d}:{n % 60:02d}.000Z",
        "agent_key": f"agent-{n}",
    }
    return ApprovalRecord.model_validate({**data, **changes})


# -- the catalog ------------------------------------------------------------------------------


def test_a_tool_is_described_by_its_docstring_and_its_arguments_schema() -> None:
    registry = ToolRegistry()

    @registry.tool(confirm=True, timeout_s=3.0, retry_on=(ConnectionError,))
    def transfer(
        account: Annotated[str, Field(description="IBAN of the payee.")],
        amount_cents: int,
        delay_s: float = 0.0,
        tags: list[str] | None = None,
    ) -> None:
        """Move money between accounts.

        Longer text for the tool's page.
        """

    info = describe_tool(registry.get("transfer"))
    assert info.summary == "Move money between accounts."
    assert "Longer text" in info.description
    assert (info.confirm, info.timeout_s, info.retry_on) == (True, 3.0, ("ConnectionError",))
    by_name = {a.name: a for a in info.arguments}
    assert list(by_name) == ["account", "amount_cents", "delay_s", "tags"]
    assert by_name["account"].type == "string" and by_name["account"].required
    assert by_name["account"].description == "IBAN of the payee."
    assert (by_name["amount_cents"].type, by_name["amount_cents"].unit) == ("integer", "cents")
    assert (by_name["delay_s"].unit, by_name["delay_s"].required) == ("seconds", False)
    assert by_name["delay_s"].has_default and by_name["delay_s"].default == 0.0
    assert by_name["tags"].type == "list of string or null"
    assert not info.any_keys


def test_units_come_from_the_schema_or_the_name() -> None:
    assert unit_of("timeout_ms") == "milliseconds"
    assert unit_of("seconds") == "seconds"
    assert unit_of("size_bytes") == "bytes"
    assert unit_of("customer") is None
    assert unit_of("amount", {"unit": "EUR"}) == "EUR"


def test_the_catalog_holds_the_topology_s_served_tools_or_says_why_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # load_catalog exports the settings to the environment, as a review process does at
    # start; give it a copy so later tests keep theirs.
    monkeypatch.setattr(os, "environ", os.environ.copy())
    catalog = load_catalog(Settings(broker="127.0.0.1:1"))
    assert catalog.error is None
    assert set(catalog.tools) == set(TOOLS)
    assert "admin_reset" not in catalog.tools
    assert catalog.tools["echo"].any_keys
    assert catalog.tools["send_invoice"].idempotent and catalog.tools["send_invoice"].confirm
    broken = load_catalog(Settings(broker="127.0.0.1:1", topology="no_such_topology_module"))
    assert broken.tools == {}
    assert broken.error is not None and "no_such_topology_module" in broken.error


def test_arguments_are_shown_against_the_schema_with_units_and_notes() -> None:
    tool = catalog_of(topology_tools(topologies.demo)).tools["send_invoice"]
    rows = pages.argument_rows(record(arguments={"customer": "Acme", "amount_cents": 123456}), tool)
    assert [(r.name, r.value, r.type, r.unit) for r in rows] == [
        ("customer", '"Acme"', "string", None),
        ("amount_cents", "123456", "integer", "cents"),
    ]
    assert rows[1].hint == "= 1,234.56"
    assert rows[0].description == "Who is billed, as named on the invoice."
    odd = pages.argument_rows(record(arguments={"customer": "Acme", "extra": 1}), tool)
    assert [(r.name, r.note) for r in odd] == [
        ("customer", None),
        ("amount_cents", "missing"),
        ("extra", "not in the tool's schema"),
    ]
    unknown = pages.argument_rows(record(arguments={"wait_s": 90}), None)
    assert [(r.type, r.unit, r.hint, r.note) for r in unknown] == [
        ("integer", "seconds", "= 1 min 30 s", None)
    ]


# -- listing ----------------------------------------------------------------------------------


def test_identical_pending_calls_are_grouped_whatever_the_key_order() -> None:
    a = record(1, arguments={"customer": "x", "amount_cents": 5})
    b = record(2, arguments={"amount_cents": 5, "customer": "x"})
    c = record(3, arguments={"customer": "x", "amount_cents": 6})
    d = record(4, tool="echo", arguments={"customer": "x", "amount_cents": 5})
    twins = IdenticalCalls([a, b, c, d])
    assert twins.twins(a.approval_id) == Twins(1, (b.approval_id,))
    assert twins.twins(b.approval_id) == Twins(1, (a.approval_id,))
    assert twins.twins(c.approval_id) == twins.twins(d.approval_id) == Twins()
    twins.discard(a.approval_id)
    assert twins.twins(b.approval_id) == Twins()


def test_search_matches_every_word_in_ids_tool_key_and_arguments() -> None:
    r = record(7, arguments={"customer": "Acme GmbH", "amount_cents": 1})
    for query in ("acme", "ACME gmbh", "run-7", "appr_0007", "agent-7", "send_invoice acme", ""):
        assert matches(r, query), query
    assert not matches(r, "acme globex")


def test_pages_of_fifty_with_the_page_clamped() -> None:
    records = [record(n) for n in range(PAGE_SIZE + 7)]
    first = page_of(records)
    assert (len(first.items), first.count, first.first, first.last) == (50, 2, 1, 50)
    second = page_of(records, number=2)
    assert [r.approval_id for r in second.items] == [r.approval_id for r in records[50:]]
    assert (second.first, second.last) == (51, 57)
    assert page_of(records, number=99).number == 2
    assert page_of(records, number=-3).number == 1
    found = page_of(records, "customer-56")
    assert (found.matched, found.total, found.count) == (1, 57, 1)
    assert page_of([], "x").first == 0


# -- time and history -------------------------------------------------------------------------


def test_one_time_format_absolute_with_relative_beside_it() -> None:
    now = datetime(2024, 1, 1, 1, 0, 0, tzinfo=UTC)
    shown = pages.moment("2024-01-01T00:55:00.000Z", now)
    assert shown is not None
    assert TIME.match(shown.absolute) and shown.absolute == "2024-01-01 00:55:00 UTC"
    assert shown.relative == "5 min ago"
    offset = pages.moment("2024-01-01T02:00:00+02:00", now)
    assert offset is not None and offset.absolute == "2024-01-01 00:00:00 UTC"
    assert pages.moment("yesterday") is None and pages.moment(None) is None
    assert [pages.ago(s) for s in (5, 125, 7200, 200000)] == [
        "5 s ago",
        "2 min ago",
        "2 h ago",
        "2 d ago",
    ]


def test_history_of_a_call_that_ran() -> None:
    done = record(
        1,
        state=ApprovalState.DONE,
        reviewer="ann",
        decided_at="2024-01-01T00:05:00.000Z",
        reason="customer confirmed",
        reply={"status": "ok", "result": {"invoiced": "x"}},
    )
    seen = [
        Seen(ApprovalState.PENDING, "2024-01-01T00:00:01.000Z"),
        Seen(ApprovalState.RUNNING, "2024-01-01T00:05:01.000Z"),
        Seen(ApprovalState.DONE, "2024-01-01T00:05:02.000Z"),
    ]
    events = pages.history(done, seen)
    assert [e.kind for e in events] == ["parked", "decided", "ran", "outcome"]
    assert events[2].title == "Ran the call"
    parked = dict((label, value) for label, value, _ in events[0].facts)
    assert parked["Run"] == "run-1" and parked["Agent key"] == "agent-1"
    assert events[0].at == done.requested_at
    assert events[1].title == "Approved by ann" and events[1].at == done.decided_at
    assert ("Reason", "customer confirmed", False) in events[1].facts
    assert events[2].at == "2024-01-01T00:05:01.000Z"
    assert events[3].title == "Finished: ok" and '"invoiced": "x"' in (events[3].body or "")


def test_history_of_a_call_run_again_uses_the_record_s_last_start() -> None:
    again = record(
        5,
        state=ApprovalState.RUNNING,
        reviewer="ann",
        decided_at="2024-01-01T00:05:00.000Z",
        runs=2,
        started_at="2024-01-01T00:09:00.000Z",
    )
    events = pages.history(again, [Seen(ApprovalState.RUNNING, "2024-01-01T00:05:01.000Z")])
    assert [e.kind for e in events] == ["parked", "decided", "ran", "running"]
    assert events[2].title.startswith("Ran the call 2 times")
    assert events[2].at == "2024-01-01T00:09:00.000Z"
    assert "worker died" in events[3].title


def test_history_of_an_unknown_outcome_and_its_resolution() -> None:
    decided = {"reviewer": "ann", "decided_at": "2024-01-01T00:05:00.000Z", "runs": 1}
    unknown = record(
        6,
        state=ApprovalState.UNKNOWN,
        started_at="2024-01-01T00:05:01.000Z",
        started_by="host-1:42",
        unknown_at="2024-01-01T00:20:00.000Z",
        **decided,
    )
    events = pages.history(unknown, [])
    assert [e.kind for e in events] == ["parked", "decided", "ran", "unknown"]
    assert ("Started by", "host-1:42", True) in events[2].facts
    assert events[3].at == "2024-01-01T00:20:00.000Z"
    assert "approvals resolve appr_0006 --ran" in events[3].facts[0][1]
    assert pages.outcome(unknown) == "approved, outcome unknown"

    reported = record(
        6,
        state=ApprovalState.DONE,
        resolution="ran",
        resolved_by="bob",
        resolved_at="2024-01-01T00:30:00.000Z",
        resolution_reason="the bank shows it",
        reply={"status": "ok", "result": {"wired": 5}, "resolved_by": "bob"},
        **decided,
    )
    events = pages.history(reported, [])
    assert [e.kind for e in events] == ["parked", "decided", "unknown", "resolved", "outcome"]
    assert events[3].title == "Resolved by bob: it ran"
    assert ("Reason", "the bank shows it", False) in events[3].facts
    assert events[4].title == "Finished: ok (as the reviewer reported)"

    again = reported.model_copy(
        update={"state": ApprovalState.RUNNING, "resolution": "not_run", "reply": None, "runs": 2}
    )
    kinds = [e.kind for e in pages.history(again, [])]
    assert kinds == ["parked", "decided", "unknown", "resolved", "ran", "running"]


def test_history_without_the_compacted_versions_says_so() -> None:
    failed = record(
        2,
        state=ApprovalState.DONE,
        reviewer="bob",
        decided_at="2024-01-01T00:05:00.000Z",
        reply={"status": "error", "error": {"kind": "ToolFailed", "status": 500}},
    )
    events = pages.history(failed, [Seen(ApprovalState.DONE, "2024-01-01T00:06:00.000Z")])
    assert events[2].at is None and events[2].untimed == "start time no longer on the topic"
    assert events[3].title == "Failed: ToolFailed" and events[3].tone == "bad"
    denied = record(3, state=ApprovalState.DENIED, reviewer="bob", decided_at="2024-01-01T00:01Z")
    assert [e.kind for e in pages.history(denied, [])] == ["parked", "decided", "replied"]
    assert pages.history(denied, [])[1].facts == [("Reason", "none given", False)]
    assert [e.kind for e in pages.history(record(4), [])] == ["parked", "waiting"]


def test_the_view_keeps_when_each_state_was_written(tmp_path: Path) -> None:
    view = ApprovalsView(Settings(broker="127.0.0.1:1"))
    pending = record(1)
    running = record(1, state=ApprovalState.RUNNING, reviewer="a", decided_at="2024-01-01T00:01Z")
    assert view._apply(b"appr_0001", pending.to_bytes(), 1_704_067_200_000)
    assert not view._apply(b"appr_0001", pending.to_bytes(), 1_704_067_201_000)  # unchanged
    assert view._apply(b"appr_0001", running.to_bytes(), 1_704_067_260_500)
    assert view.history("appr_0001") == [
        Seen(ApprovalState.PENDING, "2024-01-01T00:00:00.000Z"),
        Seen(ApprovalState.RUNNING, "2024-01-01T00:01:00.500Z"),
    ]
    assert view._apply(b"appr_0001", None)  # a tombstone forgets the history too
    assert view.history("appr_0001") == []


# -- the routes -------------------------------------------------------------------------------


@pytest.fixture
def service(tmp_path: Path) -> ReviewService:
    settings = Settings(reviewers_file=tmp_path / "reviewers.json", broker="127.0.0.1:1")
    view = ApprovalsView(settings)  # never started: records are set directly
    for n in range(PAGE_SIZE + 3):
        view.records[f"appr_{n:04d}"] = record(n)
    view.records["appr_twin"] = record(1, approval_id="appr_twin", run_id="other-run")
    view.records["appr_done"] = record(
        900,
        approval_id="appr_done",
        state=ApprovalState.DENIED,
        reviewer="bob",
        decided_at="2024-01-02T00:00:00.000Z",
        reason="<b>not this month</b>",
    )
    return ReviewService(
        view=view,
        decider=Decider(view, DecisionWriter(settings)),
        reviewers=ReviewersFile(settings.reviewers_file),
        sessions=Sessions(b"s" * 32, ttl_s=600),
        catalog=catalog_of(topology_tools(topologies.demo)),
    )


@pytest.fixture
async def signed_in(service: ReviewService) -> AsyncIterator[tuple[Http, str]]:
    token = service.reviewers.add("ann")
    async with test_utils.TestClient(test_utils.TestServer(build_app(service))) as client:
        page = await client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
        assert csrf is not None
        done = await client.post(
            "/login", data={"token": token, "csrf": csrf.group(1)}, allow_redirects=False
        )
        assert done.status == 303
        home = await (await client.get("/")).text()
        found = re.search(r'name="csrf" value="([^"]+)"', home)
        assert found is not None
        yield client, found.group(1)


def _ids(html: str) -> list[str]:
    return re.findall(r'<article id="[^"]+" data-approval-id="([^"]+)"', html)


async def test_the_board_pages_searches_and_flags_twins(signed_in: tuple[Http, str]) -> None:
    client, _ = signed_in
    first = await (await client.get("/")).text()
    assert len(_ids(first)) == PAGE_SIZE
    assert "Showing 1\u201350 of 54" in first and 'href="/?page=2"' in first
    second = await (await client.get("/?page=2")).text()
    assert len(_ids(second)) == 4 and "Showing 51\u201354 of 54" in second
    found = await (await client.get("/?q=customer-7%20run-7")).text()
    assert _ids(found) == ["appr_0007"]
    assert "1 of 54 pending match" in found
    twin = await (await client.get("/?q=other-run")).text()
    assert _ids(twin) == ["appr_twin"]
    assert 'data-identical="1"' in twin and 'href="/approvals/appr_0001"' in twin
    assert "data-identical" not in found
    assert "Who is billed, as named on the invoice." in found
    live = await client.get("/live?q=customer-52&since=-1")
    assert _ids(await live.text()) == ["appr_0052"]
    assert "&lt;b&gt;not this month&lt;/b&gt;" in first  # the reason, escaped


async def test_an_approval_has_its_own_page_and_a_missing_one_answers_404(
    signed_in: tuple[Http, str],
) -> None:
    client, _ = signed_in
    response = await client.get("/approvals/appr_done")
    assert response.status == 200
    html = await response.text()
    assert 'data-event="decided"' in html and "Denied by bob" in html
    assert f'value="http://{client.host}:{client.port}/approvals/appr_done"' in html
    assert 'data-live="/live?approval=appr_done"' in html
    missing = await client.get("/approvals/appr_nope")
    assert missing.status == 404 and "No such approval" in await missing.text()
    assert (await client.get("/live?approval=appr_nope&since=-1")).status == 404


@pytest.mark.parametrize(
    ("back", "expected"),
    [
        ("/approvals/appr_done", "/approvals/appr_done"),
        ("/?q=acme&page=2", "/?q=acme&page=2"),
        ("/", "/"),
        ("//evil.example/", "/"),
        ("https://evil.example/", "/"),
        ("/approvals/appr_other", "/"),
        ("/login", "/"),
        ("/\\evil.example", "/"),
    ],
)
def test_a_decision_form_returns_only_to_its_own_pages(back: str, expected: str) -> None:
    assert web_routes._back({"back": back}, "appr_done") == expected


@pytest.mark.parametrize("back", ["/approvals/appr_done", "/?q=customer"])
async def test_a_refused_decision_is_shown_on_the_page_it_came_from(
    signed_in: tuple[Http, str], back: str
) -> None:
    client, csrf = signed_in
    response = await client.post(
        "/approvals/appr_done/decision", data={"decision": "approve", "csrf": csrf, "back": back}
    )
    assert response.status == 409  # decided already
    html = await response.text()
    assert "Not decided" in html
    assert ('data-event="parked"' in html) == back.startswith("/approvals/")


def test_catalog_error_is_shown_instead_of_a_description() -> None:
    html = pages.board_fragment(
        page_of([record(1)]),
        IdenticalCalls([record(1)]).twins,
        [],
        Catalog({}, error="topology x could not load"),
        csrf="c",
    )
    assert "topology x could not load" in html


def unknown_record(n: int, **changes: Any) -> ApprovalRecord:
    """An approved wire_funds call whose run ended with its worker."""
    data: dict[str, Any] = {
        "approval_id": f"appr_unknown_{n}",
        "tool": "wire_funds",
        "arguments": {"account": f"<b>acct-{n}</b>", "amount_cents": 500},
        "state": ApprovalState.UNKNOWN,
        "reviewer": "bob",
        "decided_at": "2024-01-01T00:05:00.000Z",
        "runs": 1,
        "started_at": "2024-01-01T00:05:01.000Z",
        "started_by": f"kafka:app@host-{n}:42",
        "unknown_at": "2024-01-01T00:20:00.000Z",
    }
    return record(n, **{**data, **changes})


async def test_the_board_lists_unknown_outcomes_apart_with_both_resolutions(
    signed_in: tuple[Http, str], service: ReviewService
) -> None:
    client, _ = signed_in
    service.view.records["appr_unknown_1"] = unknown_record(1)
    service.view.records["appr_unknown_2"] = unknown_record(2, runs=2, resolution="not_run")
    html = await (await client.get("/")).text()
    assert "Outcome unknown (2)" in html and 'data-unknown="2"' in html
    unknown = html.split('id="unknown-h"')[1].split('id="pending-h"')[0]
    assert _ids(unknown) == ["appr_unknown_1", "appr_unknown_2"]
    first = unknown.split('data-approval-id="appr_unknown_1"')[1].split("</article>")[0]
    assert "&lt;b&gt;acct-1&lt;/b&gt;" in first and "<b>acct-1" not in first  # escaped
    assert "Wire money to an account" in first  # the tool's description, from the catalog
    assert "kafka:app@host-1:42" in first and "2024-01-01 00:05:01 UTC" in first
    assert 'action="/approvals/appr_unknown_1/resolution"' in first
    assert 'value="ran"' in first and 'value="not_run"' in first
    second = unknown.split('data-approval-id="appr_unknown_2"')[1].split("</article>")[0]
    assert 'value="ran"' in second and 'value="not_run"' not in second  # once only
    assert "already run again once" in second
    # Pending approvals stay a list of their own; the search applies to both.
    assert "appr_unknown_1" not in html.split('id="pending-h"')[1].split('id="recent-h"')[0]
    found = await (await client.get("/?q=host-2")).text()
    assert _ids(found.split('id="pending-h"')[0]) == ["appr_unknown_2"]
    assert "1 of 2 match" in found
    assert "with an unknown outcome" in found  # in the live region's summary
    empty = await (await client.get("/?q=nothing-like-this")).text()
    assert "No unknown outcome matches." in empty
    # The search box says it filters both lists.
    assert '<label for="q">Search pending approvals and unknown outcomes</label>' in html


async def test_an_unknown_outcome_s_page_offers_the_resolution_and_shows_its_history(
    signed_in: tuple[Http, str], service: ReviewService
) -> None:
    client, _ = signed_in
    service.view.records["appr_unknown_1"] = unknown_record(1)
    html = await (await client.get("/approvals/appr_unknown_1")).text()
    assert 'class="badge unknown"' in html and 'data-state="unknown"' in html
    assert 'action="/approvals/appr_unknown_1/resolution"' in html
    assert 'name="back" value="/approvals/appr_unknown_1"' in html
    assert 'data-event="unknown"' in html and "resolve it on this page" in html
    service.view.records["appr_unknown_1"] = unknown_record(
        1,
        state=ApprovalState.DONE,
        resolution="ran",
        resolved_by="ann",
        resolved_at="2024-01-01T00:30:00.000Z",
        reply={"status": "ok", "result": {"wired": 5}, "resolved_by": "ann"},
    )
    html = await (await client.get("/approvals/appr_unknown_1")).text()
    assert "/resolution" not in html  # settled: nothing left to resolve
    assert 'data-event="resolved"' in html and "Resolved by ann: it ran" in html
    assert "Finished: ok (as the reviewer reported)" in html


@pytest.mark.parametrize(
    ("form", "status", "message"),
    [
        ({"resolution": "ran", "csrf": "forged"}, 403, ""),
        ({"resolution": "maybe"}, 400, "Choose"),
        ({"resolution": "not_run", "result": "1"}, 400, "A result goes with"),
        ({"resolution": "ran", "result": "{not json"}, 400, "must be JSON"),
        ({"resolution": "ran", "result": "NaN"}, 400, "must be JSON"),
        ({"resolution": "ran", "result": "1" * 20000}, 400, "must be JSON"),
        ({"resolution": "ran", "reason": "x" * 5000}, 400, "at most 4096"),
    ],
)
async def test_a_resolution_form_is_checked_before_anything_is_sent(
    signed_in: tuple[Http, str],
    service: ReviewService,
    form: dict[str, str],
    status: int,
    message: str,
) -> None:
    client, csrf = signed_in
    service.view.records["appr_unknown_1"] = unknown_record(1)
    data = {"csrf": csrf, "back": "/approvals/appr_unknown_1", **form}
    response = await client.post("/approvals/appr_unknown_1/resolution", data=data)
    assert response.status == status
    html = await response.text()
    assert message in html and 'role="alert"' in html
    assert service.decider.resolution_sent("appr_unknown_1") is None  # nothing written


@pytest.mark.parametrize(
    ("approval_id", "resolution", "message"),
    [
        ("appr_0001", "ran", "not an unknown outcome"),  # pending
        ("appr_done", "ran", "not an unknown outcome"),  # denied
        ("appr_unknown_2", "not_run", "already run again once"),
        ("appr_nope", "ran", "no such approval"),
    ],
)
async def test_a_resolution_of_anything_but_an_unknown_outcome_is_refused(
    signed_in: tuple[Http, str],
    service: ReviewService,
    approval_id: str,
    resolution: str,
    message: str,
) -> None:
    client, csrf = signed_in
    service.view.records["appr_unknown_2"] = unknown_record(2, runs=2, resolution="not_run")
    response = await client.post(
        f"/approvals/{approval_id}/resolution",
        data={"csrf": csrf, "resolution": resolution, "back": "/"},
    )
    assert response.status == (404 if approval_id == "appr_nope" else 409)
    html = await response.text()
    assert "Not resolved" in html and message in html
    assert 'id="unknown-h"' in html  # back on the board, with the message


class _Written:
    """A decisions writer that keeps what it is given (the worker's side is the view)."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def write(self, message: Any, record: Any = None) -> None:
        self.messages.append(message)


async def test_a_decision_or_resolution_the_worker_refuses_says_so_and_why(
    signed_in: tuple[Http, str], service: ReviewService
) -> None:
    client, _ = signed_in
    decider = service.decider
    decider.writer = _Written()  # type: ignore[assignment]
    # A decision sent while pending; the approval expires before the worker applies it.
    await decider.decide("appr_0001", approved=True, reviewer="ann", wait_s=0.01)
    board = await (await client.get("/")).text()
    assert "Decision sent; waiting for the worker." in board
    service.view.records["appr_0001"] = record(
        1, state=ApprovalState.EXPIRED, settled_at="2024-01-01T01:00:00.000Z"
    )
    board = await (await client.get("/")).text()
    assert 'data-refused="appr_0001"' in board
    assert "Not decided: approval is expired." in board
    page = await (await client.get("/approvals/appr_0001")).text()
    assert 'role="alert" data-refused="appr_0001">Not decided: approval is expired.' in page
    # A resolution sent while unknown; another reviewer's lands first, so this one is refused.
    service.view.records["appr_unknown_1"] = unknown_record(1)
    await decider.resolve("appr_unknown_1", ran=True, reviewer="ann", result=1, wait_s=0.01)
    board = await (await client.get("/")).text()
    assert "Resolution sent; waiting for the worker." in board
    service.view.records["appr_unknown_1"] = unknown_record(
        1,
        state=ApprovalState.DONE,
        resolution="ran",
        resolved_by="bob",
        resolved_at="2024-01-01T00:30:00.000Z",
        reply={"status": "ok", "result": 2, "resolved_by": "bob"},
    )
    board = await (await client.get("/")).text()
    assert "Resolution sent; waiting for the worker." not in board
    why = "Not resolved: another resolution came first by bob; approval is done."
    assert why in board
    assert why in await (await client.get("/approvals/appr_unknown_1")).text()
    # What lands as sent is no refusal.
    await decider.decide("appr_0002", approved=False, reviewer="ann", wait_s=0.01)
    service.view.records["appr_0002"] = record(
        2, state=ApprovalState.DENIED, reviewer="ann", decided_at="2024-01-01T00:10:00.000Z"
    )
    assert "appr_0002" not in decider.refusals()


async def test_a_render_costs_the_page_not_the_identical_pending_calls(
    signed_in: tuple[Http, str], service: ReviewService, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = signed_in
    flood = 2_000
    for n in range(flood):  # one call parked again and again under fresh ids
        approval_id = f"appr_flood_{n:05d}"
        service.view.records[approval_id] = record(
            1, approval_id=approval_id, run_id=f"flood-{n}", requested_at="2023-01-01T00:00:00Z"
        )
    signatures = 0
    signature = listing.call_signature

    def counted(r: ApprovalRecord) -> bytes:
        nonlocal signatures
        signatures += 1
        return signature(r)

    monkeypatch.setattr(listing, "call_signature", counted)
    for path in ("/", "/live?since=-1", "/?page=7", "/approvals/appr_flood_00003"):
        signatures = 0
        html = await (await client.get(path)).text()
        assert signatures <= PAGE_SIZE, path  # nothing is grouped again on a render
        # Each card names a few of its twins and counts the rest.
        assert f'data-identical="{flood + 1}"' in html, path
        assert len(re.findall(r'class="id" href="/approvals/appr_flood_', html)) <= (
            PAGE_SIZE * TWINS_SHOWN
        )
