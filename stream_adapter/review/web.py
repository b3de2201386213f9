"""The review service's routes: the page (session cookie + CSRF) and the JSON API (bearer tokens).

Every route is authenticated. A request without a valid credential gets 401: API routes a problem
object with `WWW-Authenticate: Bearer`, page routes the login form (so `/login` itself answers 401
until a token is given). The reviewer's name always comes from the credential.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stream_adapter import logs
from stream_adapter.approvals import ApprovalState
from stream_adapter.errors import (
    AdapterError,
    ApprovalConflict,
    ApprovalNotFound,
    ToolUsageError,
    problem,
)
from stream_adapter.review import pages
from stream_adapter.review.auth import (
    Forbidden,
    ReviewersFile,
    Session,
    Sessions,
    Unauthenticated,
)
from stream_adapter.review.decide import Decider
from stream_adapter.review.view import ApprovalsView, record_json

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
AuthKind = Literal["api", "page", "login"]

SESSION_COOKIE = "sa_session"
LOGIN_COOKIE = "sa_login"
LONG_POLL_S = 25.0
REALM = 'Bearer realm="stream-adapter review"'
_CSP = (
    "default-src 'none'; script-src 'nonce-{n}'; style-src 'nonce-{n}'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@dataclass
class ReviewService:
    """What the routes need: the view, the decider, the reviewers and the session signer."""

    view: ApprovalsView
    decider: Decider
    reviewers: ReviewersFile
    sessions: Sessions
    secure_cookies: bool = False


SERVICE = web.AppKey("service", ReviewService)
NONCE = web.RequestKey("nonce", str)
REVIEWER = web.RequestKey("reviewer", str)
SESSION = web.RequestKey("session", Session)


def auth(kind: AuthKind) -> Callable[[Handler], Handler]:
    """Mark a handler with how its requests authenticate."""

    def mark(handler: Handler) -> Handler:
        handler.auth_kind = kind  # type: ignore[attr-defined]
        return handler

    return mark


class DecisionRequest(BaseModel):
    """The API's decision body; the reviewer is never part of it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    approved: bool
    reason: str | None = Field(default=None, max_length=4096)


class ResolutionRequest(BaseModel):
    """The API's resolution body for an unknown outcome; the reviewer is never part of it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ran: bool
    result: Any = None
    reason: str | None = Field(default=None, max_length=4096)


# -- helpers ----------------------------------------------------------------------------------


def _service(request: web.Request) -> ReviewService:
    return request.app[SERVICE]


def _problem_response(exc: AdapterError) -> web.Response:
    body = problem(exc)
    headers = {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = REALM + (
            ', error="invalid_token"' if "invalid" in exc.detail else ""
        )
    return web.json_response(
        body, status=exc.status, headers=headers, content_type="application/problem+json"
    )


def _redirect(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def _login_response(request: web.Request, *, error: str | None = None) -> web.Response:
    """401 with the login form, and a fresh nonce cookie its CSRF token is bound to."""
    service = _service(request)
    nonce = secrets.token_urlsafe(16)
    html = pages.login_page(service.sessions.login_csrf(nonce), request[NONCE], error=error)
    response = _html(html, 401)
    response.headers["WWW-Authenticate"] = REALM
    response.set_cookie(
        LOGIN_COOKIE,
        nonce,
        httponly=True,
        samesite="Strict",
        secure=service.secure_cookies,
        max_age=3600,
        path="/login",
    )
    return response


async def _bearer(request: web.Request) -> str:
    """The reviewer named by the Authorization header's bearer token."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("a bearer token is required")
    reviewers = _service(request).reviewers
    reviewer = await asyncio.to_thread(reviewers.verify, token.strip())
    return reviewer.name


def _session(request: web.Request) -> Session:
    """The session of the request's cookie, if it still belongs to a current reviewer."""
    service = _service(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        raise Unauthenticated("sign in first")
    session = service.sessions.check(cookie)
    reviewer = service.reviewers.by_token_id(session.token_id)
    if reviewer is None or reviewer.name != session.name:
        raise Unauthenticated("the session's reviewer is no longer allowed")
    return session


# -- middlewares ------------------------------------------------------------------------------


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A CSP nonce per response, no caching, no sniffing, no framing, no referrer."""
    request[NONCE] = nonce = secrets.token_urlsafe(16)
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        _harden(exc.headers, nonce)
        raise
    _harden(response.headers, nonce)
    return response


def _harden(headers: Any, nonce: str) -> None:
    headers.setdefault("Content-Security-Policy", _CSP.format(n=nonce))
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "no-referrer"
    headers["X-Frame-Options"] = "DENY"
    headers["Cache-Control"] = "no-store"


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Require the credential the route's kind asks for; unknown paths need one too."""
    route_handler = request.match_info.route.handler
    kind: AuthKind | None = getattr(route_handler, "auth_kind", None)
    api = request.path.startswith("/api/")
    try:
        if kind == "api" or (kind is None and api):
            request[REVIEWER] = await _bearer(request)
        elif kind == "page" or kind is None:
            session = _session(request)
            request[SESSION] = session
            request[REVIEWER] = session.name
    except Unauthenticated as exc:
        logs.event(logs.INFO, "review: unauthenticated request", path=request.path)
        if kind == "api" or (kind is None and api):
            return _problem_response(exc)
        return _login_response(request)
    try:
        return await handler(request)
    except AdapterError as exc:
        if api:
            return _problem_response(exc)
        raise


# -- page routes ------------------------------------------------------------------------------


def _page(
    request: web.Request, *, notice: str | None = None, alert: str | None = None, status: int = 200
) -> web.Response:
    service = _service(request)
    session: Session = request[SESSION]
    csrf = service.sessions.csrf_token(session)
    view = service.view
    html = pages.main_page(
        session.name,
        csrf,
        request[NONCE],
        _fragment(service, csrf),
        view.version,
        notice=notice,
        alert=alert,
    )
    return _html(html, status)


def _fragment(service: ReviewService, csrf: str) -> str:
    view = service.view
    pending = view.select(ApprovalState.PENDING)
    sent = {r.approval_id for r in pending if service.decider.sent(r.approval_id) is not None}
    return pages.live_fragment(pending, view.recent_decisions(), csrf=csrf, sent=sent)


@auth("page")
async def index(request: web.Request) -> web.StreamResponse:
    """The approvals page."""
    notice = pages.NOTICES.get(request.query.get("notice", ""))
    return _page(request, notice=notice)


@auth("page")
async def live(request: web.Request) -> web.StreamResponse:
    """The live fragment, long-polled: answers when the view passes `since` or after a while."""
    service = _service(request)
    try:
        since = int(request.query.get("since", "-1"))
    except ValueError:
        since = -1
    version = await service.view.wait_changed(since, LONG_POLL_S)
    csrf = service.sessions.csrf_token(request[SESSION])
    response = _html(_fragment(service, csrf))
    response.headers["X-View-Version"] = str(version)
    return response


@auth("page")
async def decide_form(request: web.Request) -> web.StreamResponse:
    """Approve or deny from the page; 409 with a message when the approval is not pending."""
    service = _service(request)
    session: Session = request[SESSION]
    form = await request.post()
    try:
        service.sessions.check_csrf(session, str(form.get("csrf", "")))
    except Forbidden as exc:
        return _page(request, alert=exc.detail, status=403)
    verdict = form.get("decision")
    if verdict not in ("approve", "deny"):
        return _page(request, alert="Choose Approve or Deny.", status=400)
    approval_id = request.match_info["approval_id"]
    reason = str(form.get("reason", "")).strip() or None
    try:
        outcome = await service.decider.decide(
            approval_id, approved=verdict == "approve", reviewer=session.name, reason=reason
        )
    except ApprovalConflict as exc:
        return _page(request, alert=f"Not decided: {exc.detail}.", status=409)
    except AdapterError as exc:
        return _page(request, alert=f"Not decided: {exc.detail}.", status=exc.status)
    word = (
        "sent"
        if outcome.record is None
        else ("approved" if outcome.decision.approved else "denied")
    )
    return _redirect(f"/?notice={word}")


@auth("login")
async def login_form(request: web.Request) -> web.StreamResponse:
    """The login form (401 until signed in); signed in, go to the page."""
    try:
        _session(request)
    except Unauthenticated:
        return _login_response(request)
    return _redirect("/")


@auth("login")
async def login(request: web.Request) -> web.StreamResponse:
    """Check a token (and the form's CSRF token), then set the signed session cookie."""
    service = _service(request)
    form = await request.post()
    token = str(form.get("token", "")).strip()
    if not token:
        return _login_response(request, error="Enter your reviewer token.")
    try:
        service.sessions.check_login_csrf(
            request.cookies.get(LOGIN_COOKIE, ""), str(form.get("csrf", ""))
        )
        reviewer = await asyncio.to_thread(service.reviewers.verify, token)
    except Forbidden:
        return _login_response(request, error="The form expired; sign in again.")
    except Unauthenticated:
        logs.event(logs.WARNING, "review: login failed", event="login_failed")
        return _login_response(request, error="That token is not valid.")
    _, cookie = service.sessions.issue(reviewer)
    response = _redirect("/")
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        httponly=True,
        samesite="Strict",
        secure=service.secure_cookies,
        max_age=service.sessions.ttl_s,
        path="/",
    )
    response.del_cookie(LOGIN_COOKIE, path="/login")
    logs.event(logs.INFO, "review: signed in", reviewer=reviewer.name)
    return response


@auth("page")
async def logout(request: web.Request) -> web.StreamResponse:
    """Forget the session cookie (CSRF-checked, so another site cannot sign you out)."""
    service = _service(request)
    form = await request.post()
    try:
        service.sessions.check_csrf(request[SESSION], str(form.get("csrf", "")))
    except Forbidden as exc:
        return _page(request, alert=exc.detail, status=403)
    response = _redirect("/login")
    response.del_cookie(SESSION_COOKIE, path="/")
    return response


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
    records = _service(request).view.select(state)
    return web.json_response({"approvals": [record_json(r) for r in records]})


@auth("api")
async def api_get(request: web.Request) -> web.StreamResponse:
    """GET /api/approvals/{id}: one record."""
    approval_id = request.match_info["approval_id"]
    record = _service(request).view.get(approval_id)
    if record is None:
        raise ApprovalNotFound("no such approval", approval_id=approval_id)
    return web.json_response(record_json(record))


@auth("api")
async def api_decide(request: web.Request) -> web.StreamResponse:
    """POST /api/approvals/{id}/decision {"approved", "reason"?}: 200 decided, 202 sent, 409."""
    approval_id = request.match_info["approval_id"]
    try:
        body = DecisionRequest.model_validate_json(await request.read())
    except ValidationError:
        raise ToolUsageError(
            'the body is {"approved": bool, "reason"?: str}; the reviewer comes from the token'
        ) from None
    outcome = await _service(request).decider.decide(
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
    try:
        body = ResolutionRequest.model_validate_json(await request.read())
    except ValidationError:
        raise ToolUsageError(
            'the body is {"ran": bool, "result"?: any, "reason"?: str}; '
            "the reviewer comes from the token"
        ) from None
    if body.result is not None and not body.ran:
        raise ToolUsageError("a result goes with ran: true")
    outcome = await _service(request).decider.resolve(
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
    app.router.add_post("/approvals/{approval_id}/decision", decide_form)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/api/approvals", api_list)
    app.router.add_get("/api/approvals/{approval_id}", api_get)
    app.router.add_post("/api/approvals/{approval_id}/decision", api_decide)
    app.router.add_post("/api/approvals/{approval_id}/resolution", api_resolve)
    return app
