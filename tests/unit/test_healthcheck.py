"""The image's health check (deploy/healthcheck.py) against the worker's real metrics server and
the review service's real routes, served in this process on free ports."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from stream_adapter.review.auth import ReviewersFile, Sessions
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.view import ApprovalsView
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import Settings
from stream_adapter.stream.metrics import Metrics
from stream_adapter.stream.web import metrics_app
from stream_adapter_dev.broker.local import free_port
from tests.harness import ROOT

SCRIPT = ROOT / "deploy" / "healthcheck.py"


async def healthcheck(command: str, **env: str) -> int:
    """Run the health check for command with env; its exit code."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        command,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await asyncio.wait_for(process.wait(), 30)


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


@pytest.fixture
async def worker_port() -> AsyncIterator[int]:
    runner, port = await serve(metrics_app(Metrics(["echo"])))
    yield port
    await runner.cleanup()


@pytest.fixture
async def review_port(tmp_path: Path) -> AsyncIterator[int]:
    settings = Settings(reviewers_file=tmp_path / "reviewers.json", broker="127.0.0.1:1")
    view = ApprovalsView(settings)
    service = ReviewService(
        view=view,
        decider=Decider(view, DecisionWriter(settings)),
        reviewers=ReviewersFile(settings.reviewers_file),
        sessions=Sessions(b"s" * 32, ttl_s=600),
    )
    runner, port = await serve(build_app(service))
    yield port
    await runner.cleanup()


async def test_a_worker_is_healthy_while_its_metrics_server_answers(worker_port: int) -> None:
    assert await healthcheck("worker", STREAM_ADAPTER_WEB_PORT=str(worker_port)) == 0
    assert await healthcheck("worker", STREAM_ADAPTER_WEB_PORT=str(free_port())) == 1
    assert await healthcheck("worker", STREAM_ADAPTER_WEB_PORT="0") == 0  # metrics turned off


async def test_the_review_service_is_healthy_while_it_answers(review_port: int) -> None:
    assert await healthcheck("review", STREAM_ADAPTER_REVIEW_PORT=str(review_port)) == 0
    assert await healthcheck("review", STREAM_ADAPTER_REVIEW_PORT=str(free_port())) == 1
