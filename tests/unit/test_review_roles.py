"""Who may decide what: a tool listed in REVIEW_TOOL_ROLES is decided and resolved only by
reviewers with its role, nobody decides their own call (same name in both token files, case
aside, or a caller name the reviewers file links to them), and every decision and resolution
is logged with its reviewer. The review service and the HTTP tool server, each a real server
driven by a real HTTP client."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import test_utils, web

from stream_adapter.core.approvals import ApprovalRecord, ApprovalState
from stream_adapter.review.auth import ReviewersFile, Sessions
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.view import ApprovalsView
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import Settings
from tests.unit.tool_server_steps import tool_server

Http = test_utils.TestClient[web.Request, web.Application]


class _Producer:
    """Keeps what the real decision writer sends."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> None:
        self.values.append(value)


def _record(approval_id: str, tool: str, state: ApprovalState, **extra: Any) -> ApprovalRecord:
    return ApprovalRecord.model_validate(
        {
            "approval_id": approval_id,
            "tool": tool,
            "arguments": {"amount_cents": 5, "to": "acme"},
            "run_id": f"run-{approval_id}",
            "call_id": "call_1",
            "origin": "kafka:t",
            "source": "kafka",
            "state": state,
            "requested_at": "2024-01-01T00:00:00.000Z",
            **extra,
        }
    )


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="stream_adapter")
    return caplog


@pytest.fixture
async def review(tmp_path: Path) -> AsyncIterator[tuple[Http, ReviewService, dict[str, str]]]:
    settings = Settings(
        reviewers_file=tmp_path / "reviewers.json",
        broker="127.0.0.1:1",
        review_tool_roles="wire_funds=payments,wire_funds=treasury",
    )
    view = ApprovalsView(settings)  # never started: records are set directly
    view.records["appr_wire"] = _record("appr_wire", "wire_funds", ApprovalState.PENDING)
    view.records["appr_wire_2"] = _record("appr_wire_2", "wire_funds", ApprovalState.PENDING)
    view.records["appr_echo"] = _record("appr_echo", "send_invoice", ApprovalState.PENDING)
    view.records["appr_unknown"] = _record(
        "appr_unknown", "wire_funds", ApprovalState.UNKNOWN, runs=1
    )
    writer = DecisionWriter(settings)
    writer._producer = _Producer()  # type: ignore[assignment]
    reviewers = ReviewersFile(settings.reviewers_file)
    tokens = {
        "rita": reviewers.add("rita"),
        "pat": reviewers.add("pat", roles=("payments",)),
    }
    service = ReviewService(
        view=view,
        decider=Decider(view, writer),
        reviewers=reviewers,
        sessions=Sessions(b"s" * 32, ttl_s=600),
        tool_roles=settings.tool_roles,
    )
    async with test_utils.TestClient(test_utils.TestServer(build_app(service))) as client:
        yield client, service, tokens


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_tool_with_roles_is_decided_only_by_reviewers_with_one(
    review: tuple[Http, ReviewService, dict[str, str]], records: pytest.LogCaptureFixture
) -> None:
    client, service, tokens = review
    decision = "/api/approvals/appr_wire/decision"
    refused = await client.post(decision, json={"approved": True}, headers=bearer(tokens["rita"]))
    assert refused.status == 403
    problem = await refused.json()
    assert problem["kind"] == "Forbidden" and "payments or treasury" in problem["detail"]
    resolution = "/api/approvals/appr_unknown/resolution"
    unresolved = await client.post(resolution, json={"ran": False}, headers=bearer(tokens["rita"]))
    assert unresolved.status == 403
    assert (
        await client.post(decision, json={"approved": True}, headers=bearer(tokens["pat"]))
    ).status == 202
    resolved = await client.post(resolution, json={"ran": False}, headers=bearer(tokens["pat"]))
    assert resolved.status == 202
    other = "/api/approvals/appr_echo/decision"  # a tool without roles: any reviewer
    assert (
        await client.post(other, json={"approved": False}, headers=bearer(tokens["rita"]))
    ).status == 202
    # The page's form is refused the same way, with the reason on the page.
    page = await client.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert csrf is not None
    signed = await client.post(
        "/login", data={"token": tokens["rita"], "csrf": csrf.group(1)}, allow_redirects=False
    )
    assert signed.status == 303
    home = await (await client.get("/")).text()
    form_csrf = re.search(r'name="csrf" value="([^"]+)"', home)
    assert form_csrf is not None
    form = await client.post(
        "/approvals/appr_wire_2/decision",
        data={"csrf": form_csrf.group(1), "decision": "approve", "back": "/"},
    )
    assert form.status == 403 and "takes the role payments or treasury" in await form.text()
    refusals = [r for r in records.records if getattr(r, "event", None) == "decision_forbidden"]
    assert [r.reviewer for r in refusals] == ["rita"] * 3  # type: ignore[attr-defined]
    # Taking the role away takes effect at once (the file is read as it is now).
    service.reviewers.add("pat", replace=True)
    again = await client.post(
        "/api/approvals/appr_wire_2/decision",
        json={"approved": True},
        headers=bearer(tokens["pat"]),
    )
    assert again.status == 401  # a new token was issued; the old one is gone


async def test_every_decision_and_resolution_written_names_its_reviewer(
    review: tuple[Http, ReviewService, dict[str, str]], records: pytest.LogCaptureFixture
) -> None:
    client, _, tokens = review
    decided = await client.post(
        "/api/approvals/appr_echo/decision", json={"approved": True}, headers=bearer(tokens["rita"])
    )
    assert decided.status == 202
    resolved = await client.post(
        "/api/approvals/appr_unknown/resolution",
        json={"ran": True, "result": 1},
        headers=bearer(tokens["pat"]),
    )
    assert resolved.status == 202
    written = {
        r.getMessage(): getattr(r, "reviewer", None)
        for r in records.records
        if r.getMessage() in ("decision written", "resolution written")
    }
    assert written == {"decision written": "rita", "resolution written": "pat"}


def invoice() -> dict[str, Any]:
    return {"tool": "send_invoice", "arguments": {"customer": "acme", "amount_cents": 5}}


async def test_the_tool_server_refuses_a_reviewer_their_own_call_case_aside(
    tmp_path: Path,
) -> None:
    callers, reviewers = ReviewersFile(tmp_path / "c.json"), ReviewersFile(tmp_path / "r.json")
    ann_calls = callers.add("Ann")
    ann_reviews, rita = reviewers.add("ann"), reviewers.add("rita")
    server = tool_server(callers=callers, reviewers=reviewers)
    async with server as url, httpx.AsyncClient(base_url=url, timeout=30.0) as http:
        parked = (await http.post("/calls", json=invoice(), headers=bearer(ann_calls))).json()
        decision = f"/approvals/{parked['approval_id']}/decision"
        own = await http.post(decision, json={"approved": True}, headers=bearer(ann_reviews))
        assert own.status_code == 403 and own.json()["kind"] == "Forbidden"
        other = await http.post(decision, json={"approved": True}, headers=bearer(rita))
        assert other.status_code == 200


async def test_the_tool_server_applies_roles_and_linked_caller_names(
    tmp_path: Path, records: pytest.LogCaptureFixture
) -> None:
    callers, reviewers = ReviewersFile(tmp_path / "c.json"), ReviewersFile(tmp_path / "r.json")
    agent = callers.add("agent-7")
    bob = reviewers.add("bob", callers=("agent-7",))  # bob also holds agent-7's token
    rita, pat = reviewers.add("rita"), reviewers.add("pat", roles=("payments",))
    roles = {"wire_funds": frozenset({"payments"})}
    server = tool_server(callers=callers, reviewers=reviewers, tool_roles=roles)
    async with server as url, httpx.AsyncClient(base_url=url, timeout=30.0) as http:
        billed = (await http.post("/calls", json=invoice(), headers=bearer(agent))).json()
        own = await http.post(
            f"/approvals/{billed['approval_id']}/decision",
            json={"approved": True},
            headers=bearer(bob),
        )
        assert own.status_code == 403
        wire = {"tool": "wire_funds", "arguments": {"amount_cents": 10, "to": "x"}}
        wired = (await http.post("/calls", json=wire, headers=bearer(agent))).json()
        decision = f"/approvals/{wired['approval_id']}/decision"
        lacking = await http.post(decision, json={"approved": True}, headers=bearer(rita))
        assert lacking.status_code == 403 and "payments" in lacking.json()["detail"]
        allowed = await http.post(decision, json={"approved": True}, headers=bearer(pat))
        assert allowed.status_code == 200 and allowed.json()["reviewer"] == "pat"
        late = await http.post(decision, json={"approved": False}, headers=bearer(pat))
        assert late.status_code == 409
    refused = [r for r in records.records if getattr(r, "event", None) == "decision_forbidden"]
    assert [r.reviewer for r in refused] == ["bob", "rita"]  # type: ignore[attr-defined]
    recorded = [r for r in records.records if r.getMessage() == "decision recorded"]
    assert [r.reviewer for r in recorded] == ["pat"]  # type: ignore[attr-defined]
    ignored = [r for r in records.records if r.getMessage() == "later decision ignored"]
    assert [r.reviewer for r in ignored] == ["pat"]  # type: ignore[attr-defined]
