"""The review service's routes: the page (session cookie + CSRF) and the JSON API (bearer tokens).

Every route but `/healthz` (for load balancers; it says only "ok") is authenticated. A request
without a valid credential gets 401: API routes a problem object with `WWW-Authenticate: Bearer`,
page routes the login form (so `/login` itself answers 401 until a token is given). The
reviewer's name always comes from the credential. Failed tokens (bearer or form) are logged with
the client's address, never the token, and an address with too many of them gets 429 for a while.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlencode

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from yarl import URL

from stream_adapter import logs
from stream_adapter._json import JSONError, loads
from stream_adapter.approvals import ApprovalRecord, ApprovalState
from stream_adapter.errors import (
    AdapterError,
    ApprovalNotFound,
    ToolUsageError,
    problem,
)
from stream_adapter.review import pages
from stream_adapter.review.auth import (
    FailureLimiter,
    Forbidden,
    Reviewer,
    ReviewersFile,
    Session,
    Sessions,
    TokenChecks,
    TokenChecksBusy,
    TooManyFailures,
    Unauthenticated,
)
from stream_adapter.review.catalog import Catalog
from stream_adapter.review.decide import Decider
from stream_adapter.review.listing import page_of
from stream_adapter.review.policy import ToolRoles, check_may_decide
from stream_adapter.review.view import ApprovalsView, record_json

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
AuthKind = Literal["api", "page", "login", "public"]

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
    catalog: Catalog = field(default_factory=lambda: Catalog({}))
    limiter: FailureLimiter = field(default_factory=FailureLimiter)
    trust_forwarded: bool = False
    """Take the client's address from X-Forwarded-For (set by a proxy in front), not the peer."""
    tool_roles: ToolRoles = field(default_factory=dict)
    """Roles one of which a tool's reviewers must have (REVIEW_TOOL_ROLES)."""
    checks: TokenChecks = field(default_factory=TokenChecks)
    """Where tokens are hashed: a few threads of their own, a bounded queue."""
    proxy_warned: bool = False


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


def client_address(request: web.Request) -> str:
    """The client's address: the peer, or the address the trusted proxy in front appended."""
    if _service(request).trust_forwarded:
        forwarded = request.headers.get("X-Forwarded-For", "")
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last[:64]
    return request.remote or "unknown"


def warn_if_proxied(request: web.Request) -> None:
    """Warn (once) when requests carry X-Forwarded-For but it is not trusted: every client
    behind the proxy then shares its address, and a few bad tokens refuse them all."""
    service = _service(request)
    if service.trust_forwarded or service.proxy_warned:
        return
    if "X-Forwarded-For" in request.headers:
        service.proxy_warned = True
        logs.event(
            logs.WARNING,
            "review: requests come through a proxy (X-Forwarded-For) but "
            "REVIEW_TRUST_FORWARDED is off: sign-in limits count every client behind it as one",
            event="proxy_not_trusted",
            client=request.remote or "unknown",
        )


async def _verify(request: web.Request, token: str, event: str) -> Reviewer:
    """The reviewer a token belongs to. The attempt is counted against the client's address
    before the token is hashed (so a concurrent burst cannot pass the limit) and forgiven when
    it succeeds; a failure is logged with the address, never the token. TooManyFailures when
    the address has failed too often, TokenChecksBusy when too many tokens wait."""
    service = _service(request)
    client = client_address(request)
    try:
        stamp = service.limiter.begin(client)
    except TooManyFailures as exc:
        if exc.first:
            logs.event(
                logs.WARNING,
                "review: too many failed tokens; address refused for a while",
                event="auth_rate_limited",
                client=client,
            )
        raise
    failed = False
    try:
        reviewer = await service.checks.verify(service.reviewers, token)
    except Unauthenticated:
        failed = True
        message = "review: login failed" if event == "login_failed" else "review: token refused"
        logs.event(logs.WARNING, message, event=event, client=client)
        raise
    finally:
        if not failed:
            service.limiter.succeeded(client, stamp)
    return reviewer


async def _bearer(request: web.Request) -> str:
    """The reviewer named by the Authorization header's bearer token."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("a bearer token is required")
    return (await _verify(request, token.strip(), "bearer_failed")).name


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
    if kind == "public":
        return await handler(request)
    warn_if_proxied(request)
    api = request.path.startswith("/api/")
    try:
        if kind == "api" or (kind is None and api):
            request[REVIEWER] = await _bearer(request)
        elif kind == "page" or kind is None:
            session = _session(request)
            request[SESSION] = session
            request[REVIEWER] = session.name
    except (TooManyFailures, TokenChecksBusy) as exc:
        response = _problem_response(exc)
        response.headers["Retry-After"] = str(int(exc.retry_after_s + 0.999))
        return response
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
    """The board: one page of pending approvals (searched with `q`) and recent decisions."""
    service = _service(request)
    session: Session = request[SESSION]
    csrf = service.sessions.csrf_token(session)
    query, number = _board_query(request.query)
    html = pages.main_page(
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
    return _html(html, status)


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
    service = _service(request)
    session: Session = request[SESSION]
    csrf = service.sessions.csrf_token(session)
    record = service.view.get(approval_id)
    if record is None:
        html = pages.missing_page(session.name, csrf, request[NONCE], approval_id)
        return _html(html, 404)
    path = pages.approval_path(approval_id)
    html = pages.approval_page(
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
    return _html(html, status)


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
    service = _service(request)
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
        response = _html(_detail(service, record, csrf))
    else:
        query, number = _board_query(request.query)
        response = _html(_fragment(service, csrf, query, number))
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
        request, _service(request), request[SESSION], form, approval_id, _back(form, approval_id)
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
    return _redirect(_with_notice(posted.back, word))


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
    return _redirect(_with_notice(posted.back, word))


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
        reviewer = await _verify(request, token, "login_failed")
    except Forbidden:
        return _login_response(request, error="The form expired; sign in again.")
    except (TooManyFailures, TokenChecksBusy) as exc:
        busy = isinstance(exc, TokenChecksBusy)
        error = "Too many sign-ins at once; try again in a moment."
        response = _login_response(
            request, error=error if busy else "Too many failed sign-ins; wait a minute."
        )
        response.set_status(exc.status)
        response.headers["Retry-After"] = str(int(exc.retry_after_s + 0.999))
        return response
    except Unauthenticated:
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
    service.sessions.revoke(request[SESSION])  # a copy of the old cookie no longer works
    response = _redirect("/login")
    response.del_cookie(SESSION_COOKIE, path="/", secure=service.secure_cookies)
    logs.event(logs.INFO, "review: signed out", reviewer=request[REVIEWER])
    return response


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
    service = _service(request)
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
    try:
        body = ResolutionRequest.model_validate_json(await request.read())
    except ValidationError:
        raise ToolUsageError(
            'the body is {"ran": bool, "result"?: any, "reason"?: str}; '
            "the reviewer comes from the token"
        ) from None
    if body.result is not None and not body.ran:
        raise ToolUsageError("a result goes with ran: true")
    service = _service(request)
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
