"""A resolution's result is checked with the workers' own JSON limits before it is written, and
whatever fails on the way leaves nothing marked as sent (a real aiohttp server and client; the
producer under the real decision writer only keeps what it is given)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import test_utils, web

from stream_adapter.core._json import MAX_DEPTH
from stream_adapter.core.approvals import ApprovalRecord, ApprovalState, parse_reviewer_message
from stream_adapter.review.auth import ReviewersFile, Sessions
from stream_adapter.review.decide import Decider, DecisionWriter
from stream_adapter.review.view import ApprovalsView
from stream_adapter.review.web import ReviewService, build_app
from stream_adapter.settings import Settings

Http = test_utils.TestClient[web.Request, web.Application]
UNKNOWN = "appr_unknown"


class _Producer:
    """Keeps the values sent, as the broker would (the writer's encoding is the real one)."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    async def send_and_wait(self, topic: str, value: bytes, **_: Any) -> None:
        self.values.append(value)


def _unknown() -> ApprovalRecord:
    return ApprovalRecord.model_validate(
        {
            "approval_id": UNKNOWN,
            "tool": "send_invoice",
            "arguments": {"customer": "acme", "amount_cents": 5},
            "run_id": "run_1",
            "call_id": "call_1",
            "origin": "kafka:t",
            "state": ApprovalState.UNKNOWN,
            "requested_at": "2024-01-01T00:00:00.000Z",
            "runs": 1,
        }
    )


@pytest.fixture
def producer() -> _Producer:
    return _Producer()


@pytest.fixture
async def client(tmp_path: Path, producer: _Producer) -> AsyncIterator[tuple[Http, str]]:
    settings = Settings(reviewers_file=tmp_path / "reviewers.json", broker="127.0.0.1:1")
    view = ApprovalsView(settings)  # never started: records are set directly
    view.records[UNKNOWN] = _unknown()
    writer = DecisionWriter(settings)
    writer._producer = producer  # type: ignore[assignment]
    service = ReviewService(
        view=view,
        decider=Decider(view, writer),
        reviewers=ReviewersFile(settings.reviewers_file),
        sessions=Sessions(b"s" * 32, ttl_s=600),
    )
    token = service.reviewers.add("ann")
    async with test_utils.TestClient(test_utils.TestServer(build_app(service))) as http:
        yield http, token


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "result",
    [2**70, -(2**64), _nested(MAX_DEPTH)],
    ids=["past-64-bits", "below-int64", "nested-past-the-workers-depth"],
)
async def test_a_result_the_workers_cannot_read_is_refused_and_wedges_nothing(
    client: tuple[Http, str], producer: _Producer, result: Any
) -> None:
    http, token = client
    auth = {"Authorization": f"Bearer {token}"}
    path = f"/api/approvals/{UNKNOWN}/resolution"
    refused = await http.post(path, json={"ran": True, "result": result}, headers=auth)
    assert refused.status == 400
    assert (await refused.json())["kind"] == "ToolUsageError"
    assert producer.values == []
    # Nothing is left marked as sent: a readable resolution goes out at once.
    sent = await http.post(path, json={"ran": True, "result": 7}, headers=auth)
    assert sent.status == 202, await sent.text()
    assert [parse_reviewer_message(v).approval_id for v in producer.values] == [UNKNOWN]


async def test_a_cancelled_write_leaves_nothing_marked_as_sent(tmp_path: Path) -> None:
    settings = Settings(reviewers_file=tmp_path / "reviewers.json", broker="127.0.0.1:1")
    view = ApprovalsView(settings)
    view.records[UNKNOWN] = _unknown()
    producer = _Producer()
    writer = DecisionWriter(settings)
    writer._producer = producer  # type: ignore[assignment]
    decider = Decider(view, writer)

    async def cancelled(topic: str, value: bytes, **_: Any) -> None:
        raise asyncio.CancelledError  # the request went away mid-write

    producer.send_and_wait = cancelled  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await decider.resolve(UNKNOWN, ran=True, reviewer="ann", result=1, wait_s=0.01)
    assert decider.resolution_sent(UNKNOWN) is None
    del producer.send_and_wait  # the class's own again
    resolved = await decider.resolve(UNKNOWN, ran=True, reviewer="ann", result=1, wait_s=0.01)
    assert resolved.record is None and len(producer.values) == 1
