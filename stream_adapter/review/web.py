"""The review service's routes: the approvals board and each approval's page (session cookie +
CSRF) and the JSON API (bearer tokens).

How requests authenticate, and the login form, are in `signin`; the security headers every
response carries in `csp`; `build_app` puts them all together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from yarl import URL

from stream_adapter.core._json import JSONError, loads
from stream_adapter.core.approvals import ApprovalRecord, ApprovalState
from stream_adapter.core.errors import AdapterError, ApprovalNotFound, Forbidden, ToolUsageError
from stream_adapter.review import pages
from stream_adapter.review.auth import Session
from stream_adapter.review.bodies import read_decision, read_resolution
from stream_adapter.review.context import (
    REVIEWER,
    SERVICE,
    SESSION,
    ReviewService,
    auth,
    html,
    redirect,
    service_of,
)
from stream_adapter.review.csp import NONCE, security_headers
from stream_adapter.review.listing import page_of
from stream_adapter.review.policy import check_may_decide
from stream_adapter.review.signin import authenticate, login, login_form, sign_out
from stream_adapter.review.view import record_json

__all__ = ["ReviewService", "build_app"]

LONG_POLL_S = 25.0


# -- page routes ------------------------------------------------------------------------------


def _page(
    request: web.Request, *, notice: str | None = None, alert: str | None = None, status: int = 200
) -> web.Response:
    """The board: one page of pending approvals (searched with `q`) and recent decisions."""
    service = service_of(request)
    session: Session = request[SESSION]
    csrf = service.sessions.csrf_token(session)
    query, number = _board_query(request.query)
    page = pages.main_page(
        session.name,
        csrf,
        request[NONCE],
        _fragment(service, csrf, query, number),
        service.view.version,
        query=query,
        live_url="/live" + _board_params(query, number),
        notice=notice,
        alert=alert,
    )
    return html(page, status)


def _board_query(query: Mapping[str, str]) -> tuple[str, int]:
    """The search text and page number of a board request (bad page numbers read as 1)."""
    text = query.get("q", "")[:200].strip()
    try:
        number = int(query.get("page", "1"))
    except ValueError:
        number = 1
    return text, number


def _may(service: ReviewService, approval_id: str, reviewer: str, act: str) -> None:
    """Forbidden unless reviewer may act on the approval (its tool's role, not their own
    call); nothing to check when the view does not show it (the decider says 404)."""
    record = service.view.get(approval_id)
    if record is not None:
        check_may_decide(record, service.reviewers.by_name(reviewer), service.tool_roles, act=act)


def _sent_one(service: ReviewService, approval_id: str) -> bool:
    """Whether a decision or resolution sent from here is not shown by the view yet."""
    decider = service.decider
    return decider.sent(approval_id) is not None or decider.resolution_sent(approval_id) is not None


def _sent(service: ReviewService, records: list[ApprovalRecord]) -> set[str]:
    return {r.approval_id for r in records if _sent_one(service, r.approval_id)}


def _fragment(service: ReviewService, csrf: str, query: str = "", number: int = 1) -> str:
    view = service.view
    shown = page_of(view.records.in_state(ApprovalState.PENDING), query, number)
    unknown = page_of(view.records.in_state(ApprovalState.UNKNOWN), query)
    return pages.board_fragment(
        shown,
        view.twins,
        view.recent_decisions(),
        service.catalog,
        csrf=csrf,
        sent=_sent(service, shown.items + unknown.items),
        back="/" + _board_params(query, shown.number),
        unknown=unknown,
        refused=service.decider.refusals(),
    )


def _board_params(query: str, number: int) -> str:
    """The query string of a board's search and page (`?q=...&page=2`, or empty)."""
    params = {"q": query} if query else {}
    if number > 1:
        params["page"] = str(number)
    return f"?{urlencode(params)}" if params else ""


def _detail(service: ReviewService, record: ApprovalRecord, csrf: str) -> str:
    view = service.view
    return pages.detail_fragment(
        record,
        view.history(record.approval_id),
        view.twins,
        service.catalog,
        csrf=csrf,
        sent=_sent_one(service, record.approval_id),
        refused=service.decider.refusals().get(record.approval_id),
    )


def _approval_page(
    request: web.Request,
    approval_id: str,
    *,
    notice: str | None = None,
    alert: str | None = None,
    status: int = 200,
) -> web.Response:
    """An approval's own page, or 404 with a page that says so."""
    service = service_of(request)
    session: Session = request[SESSION]
    csrf = service.sessions.csrf_token(session)
    record = service.view.get(approval_id)
    if record is None:
        page = pages.missing_page(session.name, csrf, request[NONCE], approval_id)
        return html(page, 404)
    path = pages.approval_path(approval_id)
    page = pages.approval_page(
        session.name,
        csrf,
        request[NONCE],
        _detail(service, record, csrf),
        service.view.version,
        approval_id=approval_id,
        share_url=str(request.url.origin().join(URL(path, encoded=True))),
        notice=notice,
        alert=alert,
    )
    return html(page, status)


@auth("page")
async def index(request: web.Request) -> web.StreamResponse:
    """The approvals board."""
    notice = pages.NOTICES.get(request.query.get("notice", ""))
    return _page(request, notice=notice)


@auth("page")
async def approval_view(request: web.Request) -> web.StreamResponse:
    """GET /approvals/{id}: one approval, its arguments, decision form and history."""
    notice = pages.NOTICES.get(request.query.get("notice", ""))
    return _approval_page(request, request.match_info["approval_id"], notice=notice)


@auth("page")
async def live(request: web.Request) -> web.StreamResponse:
    """The live part of a page, long-polled: answers when the view passes `since` or after a while.

    With `approval=ID`, the part of that approval's page; else the board's (with `q`, `page`).
    """
    service = service_of(request)
    try:
        since = int(request.query.get("since", "-1"))
    except ValueError:
        since = -1
    version = await service.view.wait_changed(since, LONG_POLL_S)
    csrf = service.sessions.csrf_token(request[SESSION])
    approval_id = request.query.get("approval")
    if approval_id is not None:
        record = service.view.get(approval_id)
        if record is None:
            raise web.HTTPNotFound(text="no such approval")
        response = html(_detail(service, record, csrf))
    else:
        query, number = _board_query(request.query)
        response = html(_fragment(service, csrf, query, number))
    response.headers["X-View-Version"] = str(version)
    return response


_BACK = re.compile(r"^/(?:approvals/[A-Za-z0-9_%.~-]+)?(?:\?[^#\s]*)?$")


def _back(form: Mapping[str, Any], approval_id: str) -> str:
    """Where the form came from: the board (with its search) or the approval's page; else `/`."""
    back = str(form.get("back", "/"))
    if not _BACK.match(back) or back.startswith("//"):
        return "/"
    if back.startswith("/approvals/") and back.split("?")[0] != pages.approval_path(approval_id):
        return "/"
    return back


def _with_notice(back: str, word: str) -> str:
    url = URL(back, encoded=True)
    return str(url.update_query(notice=word))


@dataclass(frozen=True, slots=True)
class _Posted:
    """A CSRF-checked form posted about one approval, and where its answer goes."""

    request: web.Request
    service: ReviewService
    session: Session
    form: Mapping[str, Any]
    approval_id: str
    back: str

    def again(self, alert: str, status: int) -> web.Response:
        """The page the form came from again, with alert, answered with status."""
        if self.back.startswith("/approvals/"):
            return _approval_page(self.request, self.approval_id, alert=alert, status=status)
        return _page(self.request, alert=alert, status=status)


async def _posted(request: web.Request) -> _Posted | web.Response:
    """The posted form of an approval's route, or the 403 page when its CSRF token fails."""
    form = await request.post()
    approval_id = request.match_info["approval_id"]
    posted = _Posted(
        request, service_of(request), request[SESSION], form, approval_id, _back(form, approval_id)
    )
    try:
        posted.service.sessions.check_csrf(posted.session, str(form.get("csrf", "")))
    except Forbidden as exc:
        return posted.again(exc.detail, 403)
    return posted


@auth("page")
async def decide_form(request: web.Request) -> web.StreamResponse:
    """Approve or deny from a page; 409 with a message when the approval is not pending."""
    posted = await _posted(request)
    if isinstance(posted, web.Response):
        return posted
    form, again = posted.form, posted.again
    verdict = form.get("decision")
    if verdict not in ("approve", "deny"):
        return again("Choose Approve or Deny.", 400)
    reason = str(form.get("reason", "")).strip() or None
    try:
        _may(posted.service, posted.approval_id, posted.session.name, "decide")
        outcome = await posted.service.decider.decide(
            posted.approval_id,
            approved=verdict == "approve",
            reviewer=posted.session.name,
            reason=reason,
        )
    except AdapterError as exc:
        return again(f"Not decided: {exc.detail}.", exc.status)
    word = (
        "sent"
        if outcome.record is None
        else ("approved" if outcome.decision.approved else "denied")
    )
    return redirect(_with_notice(posted.back, word))


MAX_RESULT_BYTES = 16384
"""The largest result a reviewer types on the page (the API takes up to the body limit)."""


@auth("page")
async def resolve_form(request: web.Request) -> web.StreamResponse:
    """Resolve an unknown outcome from a page: "it ran" (with an optional JSON result) or
    "it did not run"; 409 with a message when the outcome is not unknown (any more)."""
    posted = await _posted(request)
    if isinstance(posted, web.Response):
        return posted
    form, again = posted.form, posted.again
    kind = form.get("resolution")
    if kind not in ("ran", "not_run"):
        return again("Choose “It ran” or “It did not run”.", 400)
    text = str(form.get("result", "")).strip()
    if text and kind == "not_run":
        return again("A result goes with “It ran”; clear it to say it did not run.", 400)
    try:
        result = loads(text, MAX_RESULT_BYTES) if text else None
    except JSONError as exc:
        return again(f"Not resolved: the result must be JSON ({exc}).", 400)
    reason = str(form.get("reason", "")).strip() or None
    try:
        _may(posted.service, posted.approval_id, posted.session.name, "resolve")
        outcome = await posted.service.decider.resolve(
            posted.approval_id,
            ran=kind == "ran",
            reviewer=posted.session.name,
            result=result,
            reason=reason,
        )
    except AdapterError as exc:
        return again(f"Not resolved: {exc.detail}.", exc.status)
    word = "resolution_sent" if outcome.record is None else str(kind)
    return redirect(_with_notice(posted.back, word))


@auth("page")
async def logout(request: web.Request) -> web.StreamResponse:
    """Forget the session cookie (CSRF-checked, so another site cannot sign you out)."""
    service = service_of(request)
    form = await request.post()
    try:
        service.sessions.check_csrf(request[SESSION], str(form.get("csrf", "")))
    except Forbidden as exc:
        return _page(request, alert=exc.detail, status=403)
    return sign_out(request)


@auth("public")
async def healthz(request: web.Request) -> web.StreamResponse:
    """For load balancers: answers without a credential, and says nothing but that it serves."""
    return web.Response(text="ok\n", content_type="text/plain")


# -- API routes -------------------------------------------------------------------------------


@auth("api")
async def api_list(request: web.Request) -> web.StreamResponse:
    """GET /api/approvals[?state=...]: records oldest first."""
    raw = request.query.get("state")
    try:
        state = ApprovalState(raw) if raw else None
    except ValueError:
        raise ToolUsageError(
            f"state is one of {', '.join(s.value for s in ApprovalState)}"
        ) from None
    records = service_of(request).view.select(state)
    return web.json_response({"approvals": [record_json(r) for r in records]})


@auth("api")
async def api_get(request: web.Request) -> web.StreamResponse:
    """GET /api/approvals/{id}: one record."""
    approval_id = request.match_info["approval_id"]
    record = service_of(request).view.get(approval_id)
    if record is None:
        raise ApprovalNotFound("no such approval", approval_id=approval_id)
    return web.json_response(record_json(record))


@auth("api")
async def api_decide(request: web.Request) -> web.StreamResponse:
    """POST /api/approvals/{id}/decision {"approved", "reason"?}: 200 decided, 202 sent, 409."""
    approval_id = request.match_info["approval_id"]
    body = read_decision(await request.read())
    service = service_of(request)
    _may(service, approval_id, request[REVIEWER], "decide")
    outcome = await service.decider.decide(
        approval_id, approved=body.approved, reviewer=request[REVIEWER], reason=body.reason
    )
    if outcome.record is None:
        sent: dict[str, Any] = outcome.decision.model_dump(exclude_none=True)
        return web.json_response({"status": "sent", "decision": sent}, status=202)
    return web.json_response({"status": "decided", "approval": record_json(outcome.record)})


@auth("api")
async def api_resolve(request: web.Request) -> web.StreamResponse:
    """POST /api/approvals/{id}/resolution {"ran", "result"?, "reason"?}: an unknown outcome
    resolved: 200 shown by the table, 202 sent, 409 when its outcome is not unknown."""
    approval_id = request.match_info["approval_id"]
    body = read_resolution(await request.read())
    if body.result is not None and not body.ran:
        raise ToolUsageError("a result goes with ran: true")
    service = service_of(request)
    _may(service, approval_id, request[REVIEWER], "resolve")
    outcome = await service.decider.resolve(
        approval_id,
        ran=body.ran,
        reviewer=request[REVIEWER],
        result=body.result,
        reason=body.reason,
    )
    if outcome.record is None:
        sent: dict[str, Any] = outcome.resolution.model_dump(exclude_none=True)
        return web.json_response({"status": "sent", "resolution": sent}, status=202)
    return web.json_response({"status": "resolved", "approval": record_json(outcome.record)})


def build_app(service: ReviewService) -> web.Application:
    """The aiohttp application over service."""
    app = web.Application(middlewares=[security_headers, authenticate], client_max_size=64 * 1024)
    app[SERVICE] = service
    app.router.add_get("/", index)
    app.router.add_get("/live", live)
    app.router.add_get("/approvals/{approval_id}", approval_view)
    app.router.add_post("/approvals/{approval_id}/decision", decide_form)
    app.router.add_post("/approvals/{approval_id}/resolution", resolve_form)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/approvals", api_list)
    app.router.add_get("/api/approvals/{approval_id}", api_get)
    app.router.add_post("/api/approvals/{approval_id}/decision", api_decide)
    app.router.add_post("/api/approvals/{approval_id}/resolution", api_resolve)
    return app
