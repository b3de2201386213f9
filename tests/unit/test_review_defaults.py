"""Safe defaults of the review service: Secure cookies unless it binds to loopback, secrets long
enough or a settings error at start, secrets never copied into os.environ (where the processes
tools start would inherit them), no revocation lost to concurrent logouts, and credentials that
are not ASCII answered 401 or 403, never 500 (real aiohttp server, raw HTTP bytes)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from aiohttp import test_utils, web
from pydantic import ValidationError

from stream_adapter.review.auth import RevokedSessions, Session
from stream_adapter.review.catalog import load_catalog
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.service import review_service
from stream_adapter.review.view import ApprovalsView
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import ENV_PREFIX, Settings

Http = test_utils.TestClient[web.Request, web.Application]
SESSION_SECRET = "session-secret-canary-" + "0" * 16
DECISION_SECRET = "decision-key-canary-" + "1" * 16


@pytest.fixture
async def review(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    clients: list[Http] = []

    async def start(**changes: Any) -> tuple[Http, ReviewService]:
        settings = Settings(
            reviewers_file=tmp_path / "reviewers.json",
            broker="127.0.0.1:1",
            session_secret=SESSION_SECRET,
            **changes,
        )
        view = ApprovalsView(settings)
        service = review_service(
            settings, view, Decider(view, DecisionWriter(settings)), reviewers(settings)
        )
        client = test_utils.TestClient(test_utils.TestServer(build_app(service)))
        await client.start_server()
        clients.append(client)
        return client, service

    yield start
    for client in clients:
        await client.close()


def reviewers(settings: Settings) -> Any:
    from stream_adapter.review.auth import ReviewersFile

    return ReviewersFile(settings.reviewers_file)


def login_cookie(response: Any) -> Any:
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.getall("Set-Cookie", []):
        jar.load(header)
    return jar["sa_login"]


@pytest.mark.parametrize(
    ("changes", "secure"),
    [
        ({"review_host": "0.0.0.0"}, True),
        ({"review_host": "review.internal"}, True),
        ({"review_host": "127.0.0.1"}, False),
        ({"review_host": "::1"}, False),
        ({"review_host": "localhost"}, False),
        ({"review_host": "0.0.0.0", "review_secure_cookies": False}, False),
        ({"review_host": "127.0.0.1", "review_secure_cookies": True}, True),
    ],
)
async def test_cookies_are_secure_unless_the_service_binds_to_loopback(
    review: Callable[..., Any], changes: dict[str, Any], secure: bool
) -> None:
    client, _ = await review(**changes)
    page = await client.get("/login")
    assert bool(login_cookie(page)["secure"]) is secure


@pytest.mark.parametrize(
    "changes",
    [
        {"session_secret": "too-short"},
        {"decision_keys": "k1:short"},
        {"decision_keys": f"k1:{DECISION_SECRET},k2:short"},
    ],
)
def test_short_secrets_are_a_settings_error(changes: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(**changes)
    assert "short" not in str(raised.value).replace("shorter", "")  # never the secret


def test_a_short_key_in_the_keys_file_is_a_settings_error(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("k1:short\n")
    with pytest.raises(ValidationError):
        Settings(decision_keys_file=keys)
    keys.write_text(f"k1:{DECISION_SECRET}\n")
    assert Settings(decision_keys_file=keys).decision_keys_file == keys
    assert Settings(session_secret="").session_secret == ""  # a random one per process


@pytest.fixture
def environ() -> Iterator[None]:
    """os.environ and the exported settings as they were, afterwards."""
    from stream_adapter import settings as module

    kept: dict[str, Any] = getattr(module, "_IN_PROCESS", {})
    before, exported = dict(os.environ), dict(kept)
    yield
    os.environ.clear()
    os.environ.update(before)
    kept.clear()
    kept.update(exported)


def test_secrets_never_reach_os_environ_or_the_processes_tools_start(environ: None) -> None:
    settings = Settings(
        broker="127.0.0.1:1",
        session_secret=SESSION_SECRET,
        decision_keys=f"k1:{DECISION_SECRET}",
        topology="topologies.demo",
        app_id="secret-free-env",
    )
    load_catalog(settings)  # the review service reads the topology's tools so
    for name in ("SESSION_SECRET", "DECISION_KEYS", "SASL_PASSWORD", "SSL_KEY_PASSWORD"):
        assert f"{ENV_PREFIX}{name}" not in os.environ, name
    assert os.environ[f"{ENV_PREFIX}APP_ID"] == "secret-free-env"  # the rest is passed on
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(sorted(os.environ.items()))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert SESSION_SECRET not in child.stdout and DECISION_SECRET not in child.stdout
    # In this process, what the topology reads with Settings() still has them.
    again = Settings()
    assert (again.session_secret, again.decision_keys) == (
        SESSION_SECRET,
        f"k1:{DECISION_SECRET}",
    )
    # A variable set afterwards wins, as it would have before.
    os.environ[f"{ENV_PREFIX}SESSION_SECRET"] = "x" * 40
    assert Settings().session_secret == "x" * 40


def test_concurrent_logouts_keep_every_revocation(tmp_path: Path) -> None:
    path = tmp_path / "revoked"
    count = 24
    start = threading.Barrier(count)
    errors: list[BaseException] = []

    def logout(n: int) -> None:
        revoked = RevokedSessions(path)  # one instance each, as separate processes have
        "warm" in revoked  # noqa: B015 - read the file first, as a running service has
        start.wait()
        try:
            revoked.add(Session("ann", "t", f"{n:032x}", 2_000_000_000), now=1_000)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=logout, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    fresh = RevokedSessions(path)
    assert [n for n in range(count) if f"{n:032x}" not in fresh] == []


async def raw_get(client: Http, path: str, headers: bytes) -> int:
    """The status of a GET sent as raw bytes (clients refuse non-ASCII header text)."""
    server = client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode() + headers + b"\r\n"
    )
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1])


async def raw_post(client: Http, path: str, headers: bytes, body: bytes) -> int:
    server = client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n"
    )
    writer.write(head.encode() + headers + b"\r\n" + body)
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1])


async def test_credentials_that_are_not_ascii_get_401_or_403_never_500(
    review: Callable[..., Any],
) -> None:
    client, service = await review()
    token = service.reviewers.add("ann")
    odd = ["\u00e9".encode(), b"\xff\xfe", "\u2603".encode()]
    for raw in odd:
        bearer = b"Authorization: Bearer sa1.0123456789ab." + raw * 20 + b"\r\n"
        assert await raw_get(client, "/api/approvals", bearer) == 401, raw
        cookie = b"Cookie: sa_session=" + raw + b"." + raw + b"\r\n"
        assert await raw_get(client, "/", cookie) == 401, raw
        login = b"Cookie: sa_login=" + raw + b"\r\n"
        form = b"token=" + token.encode() + b"&csrf=%C3%A9"
        assert await raw_post(client, "/login", login, form) == 401, raw
    # A signed-in reviewer's form with a CSRF token that is not ASCII is refused, not a 500.
    page = await client.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert csrf is not None
    signed = await client.post(
        "/login", data={"token": token, "csrf": csrf.group(1)}, allow_redirects=False
    )
    assert signed.status == 303
    logout = await client.post("/logout", data={"csrf": "\u00e9\u2603"})
    assert logout.status == 403
