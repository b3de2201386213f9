"""Floods of bogus tokens cost little: a token without the token format is never hashed,
attempts are counted per address before hashing (a concurrent burst gets no more than the
limit hashed), hashing runs on a few threads with a bounded queue, the HTTP tool server limits
failed tokens too, and requests that look proxied without the trust setting are warned about.
Real aiohttp and uvicorn servers, real HTTP clients."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import test_utils, web

from stream_adapter.review import auth
from stream_adapter.review.auth import FailureLimiter, ReviewersFile, TokenChecks
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.service import review_service
from stream_adapter.review.view import ApprovalsView
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import Settings
from tests.unit.tool_server_steps import tool_server

Http = test_utils.TestClient[web.Request, web.Application]
MALFORMED = [
    "sa1.nope.nope",
    "x" * 5000,
    "sa1.0123456789ab." + "A" * 2000,
    "sa1.0123456789ab.\u00e9" + "A" * 42,
]


def test_the_token_format_is_exact() -> None:
    assert auth.well_formed(auth.new_token()[1])
    for bad in [*MALFORMED, auth.new_token()[1] + "\n", "sa1.0123456789AB." + "A" * 43]:
        assert not auth.well_formed(bad), bad


def well_formed_bogus(n: int) -> str:
    return f"sa1.{n:012x}." + "B" * 43


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts scrypt calls (one entry each)."""
    calls: list[int] = []
    real = auth.hash_token

    def counted(token: str, salt: bytes) -> bytes:
        calls.append(1)
        return real(token, salt)

    monkeypatch.setattr(auth, "hash_token", counted)
    return calls


@pytest.fixture
async def review(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    clients: list[Http] = []

    async def start(**changes: Any) -> tuple[Http, ReviewService]:
        settings = Settings(
            reviewers_file=tmp_path / "reviewers.json",
            broker="127.0.0.1:1",
            session_secret="s" * 32,
            **changes,
        )
        view = ApprovalsView(settings)  # never started: no broker is needed for these routes
        service = review_service(
            settings,
            view,
            Decider(view, DecisionWriter(settings)),
            ReviewersFile(settings.reviewers_file),
        )
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


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def raw_bearer(token: str) -> dict[str, bytes]:
    """The header as UTF-8 bytes (httpx sends only ASCII text as is)."""
    return {"Authorization": f"Bearer {token}".encode()}


async def test_tokens_without_the_token_format_are_refused_without_hashing(
    review: Callable[..., Any], hashes: list[int]
) -> None:
    client, service = await review(review_auth_failures=100)
    token = service.reviewers.add("ann")
    hashes.clear()
    for bad in MALFORMED:
        response = await client.get("/api/approvals", headers=bearer(bad))
        assert response.status == 401, bad
    assert hashes == []
    assert (await client.get("/api/approvals", headers=bearer(token))).status == 200
    assert hashes == [1]


async def test_a_concurrent_burst_of_bad_tokens_gets_no_more_than_the_limit_checked(
    review: Callable[..., Any], hashes: list[int]
) -> None:
    client, _ = await review(review_auth_failures=3)
    burst = await asyncio.gather(
        *(client.get("/api/approvals", headers=bearer(well_formed_bogus(n))) for n in range(20))
    )
    statuses = sorted(r.status for r in burst)
    assert statuses.count(401) <= 3, statuses
    assert statuses.count(429) >= 17, statuses
    assert len(hashes) <= 3


async def test_hashing_runs_on_a_few_threads_with_a_bounded_queue(
    review: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, service = await review(review_auth_failures=100, review_trust_forwarded=True)
    service.checks = TokenChecks(threads=2, queue=4)
    release = threading.Event()
    lock = threading.Lock()
    running, most = [0], [0]

    def held(token: str, salt: bytes) -> bytes:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(30)
        with lock:
            running[0] -= 1
        return b"\0" * 32

    monkeypatch.setattr(auth, "hash_token", held)

    async def one(n: int) -> int:
        headers = {**bearer(well_formed_bogus(n)), "X-Forwarded-For": f"192.0.2.{n}"}
        return (await client.get("/api/approvals", headers=headers)).status

    first = [asyncio.create_task(one(n)) for n in range(4)]
    deadline = asyncio.get_running_loop().time() + 30
    while service.checks._waiting < 4:  # the queue is full
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    busy = await asyncio.gather(*(one(n) for n in range(4, 8)))
    assert busy == [503] * 4
    release.set()
    assert await asyncio.gather(*first) == [401] * 4
    assert most[0] == 2  # never more than the checks' threads at once


async def test_proxied_requests_without_the_trust_setting_are_warned_about_once(
    review: Callable[..., Any], records: pytest.LogCaptureFixture
) -> None:
    client, _ = await review()
    for _ in range(3):
        response = await client.get("/healthz", headers={"X-Forwarded-For": "198.51.100.7"})
        assert response.status == 200
    assert not [r for r in records.records if getattr(r, "event", None) == "proxy_not_trusted"]
    for _ in range(3):
        response = await client.get(
            "/api/approvals", headers={**bearer("x"), "X-Forwarded-For": "198.51.100.7"}
        )
        assert response.status == 401
    warned = [r for r in records.records if getattr(r, "event", None) == "proxy_not_trusted"]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    trusted, _ = await review(review_trust_forwarded=True)
    records.clear()
    await trusted.get("/api/approvals", headers={"X-Forwarded-For": "198.51.100.7"})
    assert not [r for r in records.records if getattr(r, "event", None) == "proxy_not_trusted"]


async def test_the_tool_server_limits_failed_tokens_per_address_before_hashing(
    tmp_path: Path, hashes: list[int], records: pytest.LogCaptureFixture
) -> None:
    callers, reviewers = ReviewersFile(tmp_path / "c.json"), ReviewersFile(tmp_path / "r.json")
    agent = callers.add("agent-1")
    rita = reviewers.add("rita")
    limiter = FailureLimiter(3, 60.0)
    server = tool_server(callers=callers, reviewers=reviewers, limiter=limiter)
    async with server as url, httpx.AsyncClient(base_url=url, timeout=30.0) as http:
        assert (await http.get("/tools", headers=bearer(agent))).status_code == 200
        hashes.clear()
        for bad in MALFORMED:
            refused = await http.get("/approvals", headers=raw_bearer(bad))
            assert refused.status_code in (401, 429), bad
        assert hashes == []  # none of them was hashed
        limited = await http.get("/approvals", headers=bearer(well_formed_bogus(1)))
        assert limited.status_code == 429
        assert int(limited.headers["Retry-After"]) >= 1
        assert limited.json()["kind"] == "TooManyFailures"
        # A token not yet verified waits too; one verified a moment ago does not.
        assert (await http.get("/approvals", headers=bearer(rita))).status_code == 429
        assert (await http.get("/tools", headers=bearer(agent))).status_code == 200
        proxied = {**bearer("x"), "X-Forwarded-For": "198.51.100.7"}
        await http.get("/tools", headers=proxied)
        await http.get("/tools", headers=proxied)
    warned = [r for r in records.records if getattr(r, "event", None) == "proxy_not_trusted"]
    assert len(warned) == 1
