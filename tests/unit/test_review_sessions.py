"""The review service's sessions and sign-ins: a setting reaches the Secure cookie flag, logout
ends the session on the server (a copied cookie stops working, also after a restart), a health
route answers without a credential, and failed tokens are limited per client address and
logged with that address, never with the token."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from aiohttp import test_utils, web

from stream_adapter.review.auth import FailureLimiter, TooManyFailures
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.service import review_service
from stream_adapter.review.view import ApprovalsView
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import Settings

Http = test_utils.TestClient[web.Request, web.Application]
SECRET = "session-secret-for-tests-0123456789abcdef"


def make_settings(tmp_path: Path, **changes: Any) -> Settings:
    return Settings(
        reviewers_file=tmp_path / "reviewers.json",
        broker="127.0.0.1:1",
        session_secret=SECRET,
        **changes,
    )


def make_service(settings: Settings) -> ReviewService:
    from stream_adapter.review.auth import ReviewersFile

    view = ApprovalsView(settings)  # never started: no broker is needed for these routes
    decider = Decider(view, DecisionWriter(settings))
    return review_service(settings, view, decider, ReviewersFile(settings.reviewers_file))


Factory = Callable[..., Any]


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Factory]:
    """serve(**settings) -> (client, service): the routes in-process over these settings."""
    clients: list[Http] = []

    async def start(**changes: Any) -> tuple[Http, ReviewService]:
        service = make_service(make_settings(tmp_path, **changes))
        client = test_utils.TestClient(test_utils.TestServer(build_app(service)))
        await client.start_server()
        clients.append(client)
        return client, service

    yield start
    for client in clients:
        await client.close()


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="stream_adapter")
    return caplog


def set_cookies(response: Any) -> dict[str, Any]:
    """The Set-Cookie headers of a response, parsed, by cookie name."""
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.getall("Set-Cookie", []):
        jar.load(header)
    return dict(jar)


async def login(client: Http, token: str) -> tuple[Any, str]:
    """Sign in through the form: (the login POST's response, the page's CSRF token)."""
    page = await client.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert csrf is not None
    response = await client.post(
        "/login", data={"token": token, "csrf": csrf.group(1)}, allow_redirects=False
    )
    assert response.status == 303, await response.text()
    home = await client.get("/")
    assert home.status == 200
    found = re.search(r'name="csrf" value="([^"]+)"', await home.text())
    assert found is not None
    return response, found.group(1)


@pytest.mark.parametrize("secure", [True, False])
async def test_the_secure_flag_follows_the_setting(serve: Factory, secure: bool) -> None:
    client, service = await serve(review_secure_cookies=secure)
    token = service.reviewers.add("ann")
    page = await client.get("/login")
    nonce = set_cookies(page)["sa_login"]
    assert bool(nonce["secure"]) is secure
    csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert csrf is not None
    # Sent by hand: a client keeps Secure cookies for https, and this test server is http.
    response = await client.post(
        "/login",
        data={"token": token, "csrf": csrf.group(1)},
        headers={"Cookie": f"sa_login={nonce.value}"},
        allow_redirects=False,
    )
    assert response.status == 303
    session = set_cookies(response)["sa_session"]
    assert bool(session["secure"]) is secure
    assert session["httponly"] and session["samesite"] == "Strict"


async def test_logout_ends_the_session_on_the_server(serve: Factory) -> None:
    client, service = await serve()
    token = service.reviewers.add("ann")
    response, csrf = await login(client, token)
    stolen = set_cookies(response)["sa_session"].value
    out = await client.post("/logout", data={"csrf": csrf}, allow_redirects=False)
    assert out.status == 303
    client.session.cookie_jar.update_cookies({"sa_session": stolen})
    assert (await client.get("/")).status == 401
    assert (await client.get("/live")).status == 401
    # The same secret and files after a restart: the logout still holds.
    restarted, _ = await serve()
    restarted.session.cookie_jar.update_cookies({"sa_session": stolen})
    assert (await restarted.get("/")).status == 401
    # Other sessions of the same reviewer are not affected.
    _, csrf_again = await login(client, token)
    assert (await client.get("/")).status == 200 and csrf_again


async def test_health_needs_no_credential_and_says_nothing_else(serve: Factory) -> None:
    client, service = await serve()
    token = service.reviewers.add("ann")
    for headers in ({}, {"Authorization": "Bearer sa1.nope.nope"}, {"Authorization": token}):
        response = await client.get("/healthz", headers=headers)
        assert response.status == 200
        assert await response.text() == "ok\n"
        assert "WWW-Authenticate" not in response.headers
        assert response.headers["Cache-Control"] == "no-store"
    assert (await client.post("/healthz")).status in (401, 405)


async def test_failed_bearer_tokens_are_logged_with_the_address_and_limited(
    serve: Factory, records: pytest.LogCaptureFixture
) -> None:
    client, service = await serve(review_auth_failures=3)
    token = service.reviewers.add("ann")
    wrong = token.rsplit(".", 1)[0] + ".guessed-secret"
    for _ in range(3):
        response = await client.get("/api/approvals", headers={"Authorization": f"Bearer {wrong}"})
        assert response.status == 401
    refused = [r for r in records.records if getattr(r, "event", None) == "bearer_failed"]
    assert len(refused) == 3
    assert all(r.levelno == logging.WARNING and r.client == "127.0.0.1" for r in refused)  # type: ignore[attr-defined]
    limited = await client.get("/api/approvals", headers={"Authorization": f"Bearer {wrong}"})
    assert limited.status == 429 and int(limited.headers["Retry-After"]) >= 1
    assert (await limited.json())["kind"] == "TooManyFailures"
    # While limited, even the right token from that address waits (it is a guessing race).
    right = await client.get("/api/approvals", headers={"Authorization": f"Bearer {token}"})
    assert right.status == 429
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in records.records)
    assert "guessed-secret" not in text and token.rsplit(".", 1)[1] not in text
    events = [getattr(r, "event", None) for r in records.records]
    assert events.count("auth_rate_limited") == 1


async def test_failed_form_sign_ins_count_too_and_name_the_address(
    serve: Factory, records: pytest.LogCaptureFixture
) -> None:
    client, service = await serve(review_auth_failures=2, review_trust_forwarded=True)
    token = service.reviewers.add("ann")
    proxy = {"X-Forwarded-For": "198.51.100.7, 203.0.113.9"}
    for expected in (401, 401, 429):
        page = await client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
        assert csrf is not None
        response = await client.post(
            "/login", data={"token": token + "x", "csrf": csrf.group(1)}, headers=proxy
        )
        assert response.status == expected
    failed = [r for r in records.records if getattr(r, "event", None) == "login_failed"]
    assert [r.client for r in failed] == ["203.0.113.9"] * 2  # type: ignore[attr-defined]
    # Another client (another address appended by the proxy) is not held back.
    ok = await client.get("/api/approvals", headers={"Authorization": f"Bearer {token}"})
    assert ok.status == 200


def test_the_limit_lifts_when_failures_leave_the_window() -> None:
    now = [1000.0]
    limiter = FailureLimiter(2, 60.0, clock=lambda: now[0])
    assert limiter.failed("a") is False
    now[0] += 30
    assert limiter.failed("a") is True
    with pytest.raises(TooManyFailures) as raised:
        limiter.check("a")
    assert raised.value.retry_after_s == pytest.approx(30.0)
    limiter.check("b")
    now[0] += 30.5  # the first failure has left the window
    limiter.check("a")
