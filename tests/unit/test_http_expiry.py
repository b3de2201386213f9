"""PENDING_EXPIRY_S through the HTTP tool server: a call nobody decides in time answers its
agent ApprovalExpired (410), and a reviewer's late decision is refused with 409.

The server is a real uvicorn process over a redis-server approval store that takes the setting
from its environment, as a deployment would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.harness import wait_for
from tests.unit.test_http_server import Server as HttpServer
from tests.unit.test_http_server import bearer, invoice, ledger_calls, serving


@pytest.fixture
def server(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    store_url = f"{redis_server}#expiry-{uuid.uuid4().hex[:12]}"
    tmp = tmp_path_factory.mktemp("http-expiry")
    with serving(tmp, store_url, STREAM_ADAPTER_PENDING_EXPIRY_S="1") as running:
        yield running


async def test_an_expired_approval_is_410_to_its_agent_and_409_to_a_late_reviewer(
    server: HttpServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as http:
        parked = await http.post("/calls", headers=bearer(server.agent), json=invoice())
        assert parked.status_code == 200 and parked.json()["status"] == "pending_approval"
        approval_id = parked.json()["approval_id"]
        resume = f"/approvals/{approval_id}/resume"

        async def expired() -> httpx.Response | None:
            answer = await http.post(resume, headers=bearer(server.agent))
            return answer if answer.json()["status"] != "pending_approval" else None

        answer = await wait_for(expired, timeout_s=30, what="the approval to expire")
        assert answer.status_code == 410
        assert (answer.json()["kind"], answer.json()["retryable"]) == ("ApprovalExpired", False)
        decision = f"/approvals/{approval_id}/decision"
        late = await http.post(decision, headers=bearer(server.reviewer), json={"approved": True})
        assert late.status_code == 409 and late.json()["kind"] == "ApprovalConflict"
        record = await http.get(f"/approvals/{approval_id}", headers=bearer(server.reviewer))
        assert record.json()["state"] == "expired"
        assert ledger_calls(server, parked.json()["call_id"]) == 0
