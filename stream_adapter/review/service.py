"""Running the review service: the view caught up first, then the decision writer, then HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from stream_adapter.core import logs
from stream_adapter.kafka.connectivity import BrokerWatch
from stream_adapter.review.auth import (
    FailureLimiter,
    ReviewersFile,
    RevokedSessions,
    Sessions,
    session_secret,
)
from stream_adapter.review.catalog import Catalog, load_catalog
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.view import ApprovalsView
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import Settings


def revoked_sessions_file(settings: Settings) -> Path:
    """Where logouts are kept: beside the reviewers file (private, like it)."""
    path = settings.reviewers_file
    return path.with_name(f".{path.name}.revoked-sessions")


def review_service(
    settings: Settings,
    view: ApprovalsView,
    decider: Decider,
    reviewers: ReviewersFile,
    catalog: Catalog | None = None,
) -> ReviewService:
    """The routes' service as the settings configure it (cookies, sessions, sign-in limits)."""
    return ReviewService(
        view=view,
        decider=decider,
        reviewers=reviewers,
        catalog=catalog if catalog is not None else Catalog({}),
        sessions=Sessions(
            session_secret(settings.session_secret),
            settings.session_ttl_s,
            RevokedSessions(revoked_sessions_file(settings)),
        ),
        secure_cookies=settings.review_cookies_secure,
        limiter=FailureLimiter(settings.review_auth_failures, settings.review_auth_window_s),
        trust_forwarded=settings.review_trust_forwarded,
        tool_roles=settings.tool_roles,
    )


async def serve(settings: Settings, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT; on_ready gets the URL once requests are answered.

    Once connected, the broker's reachability is logged as state lines, and the clients'
    reconnect noise collapsed (connectivity.py)."""
    reviewers = ReviewersFile(settings.reviewers_file)
    if not reviewers.reviewers():
        logs.event(logs.WARNING, "review: no reviewers yet; add one with `reviewers add NAME`")
    catalog = load_catalog(settings)  # the tools' descriptions and argument schemas
    view = ApprovalsView(settings)
    await view.start()
    broker = BrokerWatch.for_settings(settings)
    await broker.start()
    writer = DecisionWriter(settings)
    runner: web.AppRunner | None = None
    try:
        await view.wait_caught_up()
        await writer.start()
        service = review_service(settings, view, Decider(view, writer), reviewers, catalog)
        runner = web.AppRunner(build_app(service), shutdown_timeout=2.0, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, settings.review_host, settings.review_port)
        await site.start()
        port = runner.addresses[0][1] if runner.addresses else settings.review_port
        if on_ready is not None:
            on_ready(f"http://{settings.review_host}:{port}/")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        if runner is not None:
            with contextlib.suppress(Exception):
                await runner.cleanup()
        await writer.stop()
        await view.stop()
        await broker.stop()
