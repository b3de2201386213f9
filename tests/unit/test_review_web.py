"""The review service's routes without a broker: authentication on every route, CSRF, the API's
validation, escaping, and 409 for records the view shows decided. (Writing decisions is covered
end to end against a real broker in tests/integration/test_review.py.)"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import test_utils, web

from stream_adapter.core.approvals import ApprovalRecord, ApprovalState
from stream_adapter.review.auth import ReviewersFile, Sessions
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.view import ApprovalsView
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import Settings

Http = test_utils.TestClient[web.Request, web.Application]
PENDING = "appr_pending"
DONE = "appr_done"


def _record(approval_id: str, state: ApprovalState, **extra: object) -> ApprovalRecord:
    return ApprovalRecord.model_validate(
        {
            "approval_id": approval_id,
            "tool": "send_invoice",
            "arguments": {"customer": "<script>alert(1)</script>", "amount_cents": 5},
            "run_id": "run_1",
            "call_id": "call_1",
            "origin": "kafka:t",
            "state": state,
            "requested_at": "2024-01-01T00:00:00.000Z",
            **extra,
        }
    )


@pytest.fixture
def service(tmp_path: Path) -> ReviewService:
    settings = Settings(reviewers_file=tmp_path / "reviewers.json", broker="127.0.0.1:1")
    view = ApprovalsView(settings)  # never started: records are set directly
    view.records[PENDING] = _record(PENDING, ApprovalState.PENDING)
    view.records[DONE] = _record(
        DONE,
        ApprovalState.DONE,
        reviewer="bob",
        decided_at="2024-01-01T00:01:00.000Z",
        reply={"status": "ok"},
    )
    return ReviewService(
        view=view,
        decider=Decider(view, DecisionWriter(settings)),
        reviewers=ReviewersFile(settings.reviewers_file),
        sessions=Sessions(b"s" * 32, ttl_s=600),
    )


@pytest.fixture
async def client(service: ReviewService) -> AsyncIterator[Http]:
    async with test_utils.TestClient(test_utils.TestServer(build_app(service))) as result:
        yield result


@pytest.fixture
def token(service: ReviewService) -> str:
    return service.reviewers.add("ann")


PUBLIC = {("GET", "/healthz"), ("HEAD", "/healthz")}
"""The only routes without a credential: the load balancers' health check."""


def _routes(app: web.Application) -> list[tuple[str, str]]:
    """(method, path) for every authenticated route of the app, placeholders filled in."""
    out = []
    for route in app.router.routes():
        info = route.get_info()
        path = info.get("path") or info.get("formatter")
        assert path, route
        if (route.method, path) not in PUBLIC:
            out.append((route.method, re.sub(r"\{[^}]+\}", PENDING, path)))
    return out


async def test_every_route_answers_401_without_a_credential(client: Http, token: str) -> None:
    routes = _routes(client.app)
    assert len(routes) >= 9
    for method, path in routes:
        response = await client.request(method, path, allow_redirects=False)
        assert response.status == 401, (method, path)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_every_route_answers_401_for_a_wrong_credential(client: Http, token: str) -> None:
    wrong = token.rsplit(".", 1)[0] + ".wrong"
    for method, path in _routes(client.app):
        for headers in ({"Authorization": f"Bearer {wrong}"}, {"Authorization": "Basic eDp5"}):
            response = await client.request(method, path, headers=headers, allow_redirects=False)
            assert response.status == 401, (method, path, headers)
        client.session.cookie_jar.update_cookies({"sa_session": "forged.0000"})
        response = await client.request(method, path, allow_redirects=False)
        assert response.status == 401, (method, path)
        client.session.cookie_jar.clear()


async def test_unknown_paths_need_a_credential_too(client: Http, token: str) -> None:
    assert (await client.get("/nope")).status == 401
    assert (await client.get("/api/nope")).status == 401
    response = await client.get("/api/nope", headers={"Authorization": f"Bearer {token}"})
    assert response.status == 404


async def test_api_lists_filters_and_gets(client: Http, token: str) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    body = await (await client.get("/api/approvals", headers=auth)).json()
    assert {r["approval_id"] for r in body["approvals"]} == {PENDING, DONE}
    body = await (await client.get("/api/approvals?state=pending", headers=auth)).json()
    assert [r["approval_id"] for r in body["approvals"]] == [PENDING]
    response = await client.get("/api/approvals?state=bogus", headers=auth)
    assert response.status == 400
    assert (await response.json())["kind"] == "ToolUsageError"
    one = await (await client.get(f"/api/approvals/{DONE}", headers=auth)).json()
    assert one["state"] == "done" and one["reviewer"] == "bob"
    missing = await client.get("/api/approvals/appr_nope", headers=auth)
    assert missing.status == 404
    assert missing.content_type == "application/problem+json"
    assert (await missing.json())["kind"] == "ApprovalNotFound"


async def test_api_decision_refuses_a_reviewer_in_the_body_and_settled_records(
    client: Http, token: str
) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    path = f"/api/approvals/{PENDING}/decision"
    for body in ({"approved": True, "reviewer": "mallory"}, {"approved": "yes"}, {}):
        response = await client.post(path, json=body, headers=auth)
        assert response.status == 400, body
    conflict = await client.post(
        f"/api/approvals/{DONE}/decision", json={"approved": True}, headers=auth
    )
    assert conflict.status == 409
    assert (await conflict.json())["kind"] == "ApprovalConflict"
    missing = await client.post(
        "/api/approvals/appr_x/decision", json={"approved": True}, headers=auth
    )
    assert missing.status == 404


async def test_api_resolution_checks_its_body_and_the_record_state(
    client: Http, token: str, service: ReviewService
) -> None:
    unknown = "appr_unknown"
    service.view.records[unknown] = _record(unknown, ApprovalState.UNKNOWN, runs=1)
    auth = {"Authorization": f"Bearer {token}"}
    body = await (await client.get("/api/approvals?state=unknown", headers=auth)).json()
    assert [r["approval_id"] for r in body["approvals"]] == [unknown]
    path = f"/api/approvals/{unknown}/resolution"
    for bad in (
        {"ran": True, "reviewer": "mallory"},
        {"ran": "yes"},
        {},
        {"ran": False, "result": 1},
        {"ran": True, "reason": "x" * 5000},
    ):
        response = await client.post(path, json=bad, headers=auth)
        assert response.status == 400, bad
    for settled in (PENDING, DONE):  # only an unknown outcome is resolved
        conflict = await client.post(
            f"/api/approvals/{settled}/resolution", json={"ran": True}, headers=auth
        )
        assert conflict.status == 409, settled
        assert (await conflict.json())["kind"] == "ApprovalConflict"
    service.view.records[unknown] = _record(
        unknown, ApprovalState.UNKNOWN, runs=2, resolution="not_run"
    )
    once = await client.post(path, json={"ran": False}, headers=auth)
    assert once.status == 409  # "it did not run" was used once already
    missing = await client.post(
        "/api/approvals/appr_x/resolution", json={"ran": True}, headers=auth
    )
    assert missing.status == 404


async def test_it_did_not_run_is_a_409_saying_when_until_the_run_deadline(
    client: Http, token: str, service: ReviewService
) -> None:
    unknown = "appr_young"
    deadline = "2999-01-01T00:00:00.000Z"
    service.view.records[unknown] = _record(
        unknown,
        ApprovalState.UNKNOWN,
        runs=1,
        started_at="2024-01-01T00:00:00.000Z",
        started_by="kafka:t@host:1",
        run_deadline=deadline,
    )
    auth = {"Authorization": f"Bearer {token}"}
    shown = await (await client.get(f"/api/approvals/{unknown}", headers=auth)).json()
    assert shown["run_deadline"] == deadline and shown["started_by"] == "kafka:t@host:1"
    path = f"/api/approvals/{unknown}/resolution"
    early = await client.post(path, json={"ran": False}, headers=auth)
    assert early.status == 409
    assert deadline in (await early.json())["detail"]


async def _login(client: Http, token: str) -> str:
    page = await client.get("/login")
    assert page.status == 401
    csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert csrf is not None
    response = await client.post(
        "/login", data={"token": token, "csrf": csrf.group(1)}, allow_redirects=False
    )
    assert response.status == 303, await response.text()
    assert "sa_session" in {c.key for c in client.session.cookie_jar}
    home = await client.get("/")
    assert home.status == 200
    found = re.search(r'name="csrf" value="([^"]+)"', await home.text())
    assert found is not None
    return found.group(1)


async def test_login_then_the_page_escapes_and_forms_need_the_csrf_token(
    client: Http, token: str
) -> None:
    csrf = await _login(client, token)
    page = await (await client.get("/")).text()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'aria-live="polite"' in page and "<h1>" in page
    path = f"/approvals/{PENDING}/decision"
    response = await client.post(path, data={"decision": "approve"}, allow_redirects=False)
    assert response.status == 403
    long = {"decision": "approve", "csrf": csrf, "reason": "x" * 5000}
    assert (await client.post(path, data=long)).status == 400
    response = await client.post(
        f"/approvals/{DONE}/decision", data={"decision": "approve", "csrf": csrf}
    )
    assert response.status == 409
    assert "Not decided" in await response.text()


async def test_login_needs_the_form_csrf_token_and_a_valid_token(client: Http, token: str) -> None:
    response = await client.post("/login", data={"token": token}, allow_redirects=False)
    assert response.status == 401
    page = await client.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert csrf is not None
    wrong = await client.post(
        "/login", data={"token": token + "x", "csrf": csrf.group(1)}, allow_redirects=False
    )
    assert wrong.status == 401 and "not valid" in await wrong.text()


async def test_removing_a_reviewer_ends_their_sessions(
    client: Http, token: str, service: ReviewService
) -> None:
    await _login(client, token)
    service.reviewers.remove("ann")
    assert (await client.get("/")).status == 401


async def test_responses_carry_a_strict_content_security_policy(
    client: Http,
) -> None:
    response = await client.get("/login")
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    nonce = re.search(r"'nonce-([^']+)'", csp)
    assert nonce is not None and f'nonce="{nonce.group(1)}"' in await response.text()
