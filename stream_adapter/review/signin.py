"""Who a review request comes from: bearer tokens for the JSON API, a signed session cookie
for the page, and the login form that sets it.

Every route but `/healthz` (for load balancers; it says only "ok") is authenticated. A request
without a valid credential gets 401: API routes a problem object with `WWW-Authenticate: Bearer`,
page routes the login form (so `/login` itself answers 401 until a token is given). The
reviewer's name always comes from the credential. Failed tokens (bearer or form) are logged with
the client's address, never the token, and an address with too many of them gets 429 for a while.
"""

from __future__ import annotations

import secrets

from aiohttp import web

from stream_adapter.core import logs
from stream_adapter.core.errors import (
    AdapterError,
    Forbidden,
    TokenChecksBusy,
    TooManyFailures,
    Unauthenticated,
    problem,
)
from stream_adapter.review import pages
from stream_adapter.review.auth import Reviewer, Session
from stream_adapter.review.context import (
    REVIEWER,
    SESSION,
    AuthKind,
    Handler,
    auth,
    html,
    redirect,
    service_of,
)
from stream_adapter.review.csp import NONCE

SESSION_COOKIE = "sa_session"
LOGIN_COOKIE = "sa_login"
REALM = 'Bearer realm="stream-adapter review"'


def problem_response(exc: AdapterError) -> web.Response:
    """exc as a problem object; a 401 says how to authenticate."""
    body = problem(exc)
    headers = {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = REALM + (
            ', error="invalid_token"' if "invalid" in exc.detail else ""
        )
    return web.json_response(
        body, status=exc.status, headers=headers, content_type="application/problem+json"
    )


def _login_response(request: web.Request, *, error: str | None = None) -> web.Response:
    """401 with the login form, and a fresh nonce cookie its CSRF token is bound to."""
    service = service_of(request)
    nonce = secrets.token_urlsafe(16)
    page = pages.login_page(service.sessions.login_csrf(nonce), request[NONCE], error=error)
    response = html(page, 401)
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
    if service_of(request).trust_forwarded:
        forwarded = request.headers.get("X-Forwarded-For", "")
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last[:64]
    return request.remote or "unknown"


def warn_if_proxied(request: web.Request) -> None:
    """Warn (once) when requests carry X-Forwarded-For but it is not trusted: every client
    behind the proxy then shares its address, and a few bad tokens refuse them all."""
    service = service_of(request)
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
    service = service_of(request)
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
    service = service_of(request)
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        raise Unauthenticated("sign in first")
    session = service.sessions.check(cookie)
    reviewer = service.reviewers.by_token_id(session.token_id)
    if reviewer is None or reviewer.name != session.name:
        raise Unauthenticated("the session's reviewer is no longer allowed")
    return session


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
        response = problem_response(exc)
        response.headers["Retry-After"] = str(int(exc.retry_after_s + 0.999))
        return response
    except Unauthenticated as exc:
        logs.event(logs.INFO, "review: unauthenticated request", path=request.path)
        if kind == "api" or (kind is None and api):
            return problem_response(exc)
        return _login_response(request)
    try:
        return await handler(request)
    except AdapterError as exc:
        if api:
            return problem_response(exc)
        raise


@auth("login")
async def login_form(request: web.Request) -> web.StreamResponse:
    """The login form (401 until signed in); signed in, go to the page."""
    try:
        _session(request)
    except Unauthenticated:
        return _login_response(request)
    return redirect("/")


@auth("login")
async def login(request: web.Request) -> web.StreamResponse:
    """Check a token (and the form's CSRF token), then set the signed session cookie."""
    service = service_of(request)
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
    response = redirect("/")
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


def sign_out(request: web.Request) -> web.Response:
    """Revoke the request's session (a copy of the old cookie no longer works) and forget its
    cookie: the answer to a logout whose form was CSRF-checked."""
    service = service_of(request)
    service.sessions.revoke(request[SESSION])
    response = redirect("/login")
    response.del_cookie(SESSION_COOKIE, path="/", secure=service.secure_cookies)
    logs.event(logs.INFO, "review: signed out", reviewer=request[REVIEWER])
    return response
