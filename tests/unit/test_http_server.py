"""The HTTP tool server (create_app) in a real uvicorn process, driven by a real HTTP client.

The server is ``examples.http_server:app`` over a redis-server approval store; tokens come
from callers and reviewers files in the review service's format. The Lambda path runs the same
app through Mangum with API Gateway v2 events, in a child process like a fresh container.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.backend import store_from_url
from stream_adapter import (
    MemoryApprovalStore,
    ToolUsageError,
    build_backend,
    create_app,
    handle_envelope,
    tool_handler,
)
from stream_adapter.review.auth import ReviewersFile
from tests.services import _free_port
from tests.unit.aws_events import sqs_event

ROOT = Path(__file__).parent.parent.parent
STEPS = Path(__file__).parent / "http_steps.py"
START_TIMEOUT_S = 30.0


@dataclass
class Server:
    """A running tool server: its URL, tokens, store URL and ledger."""

    url: str
    agent: str
    other_agent: str
    reviewer: str
    both: str  # a name listed as caller and as reviewer
    store_url: str
    ledger: Path
    env: dict[str, str]


def tokens(tmp: Path) -> tuple[dict[str, str], dict[str, str]]:
    callers, reviewers = ReviewersFile(tmp / "callers.json"), ReviewersFile(tmp / "reviewers.json")
    caller_tokens = {name: callers.add(name) for name in ("agent-1", "agent-2", "ann")}
    reviewer_tokens = {name: reviewers.add(name) for name in ("rita", "ann")}
    return caller_tokens, reviewer_tokens


def server_env(tmp: Path, store_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "STREAM_ADAPTER_APPROVAL_STORE": store_url,
        "STREAM_ADAPTER_DEMO_LEDGER": str(tmp / "ledger.jsonl"),
        "STREAM_ADAPTER_CALLERS_FILE": str(tmp / "callers.json"),
        "STREAM_ADAPTER_REVIEWERS_FILE": str(tmp / "reviewers.json"),
        # These tests send many wrong tokens on purpose (tests/unit/test_token_floods.py
        # covers the limit).
        "STREAM_ADAPTER_REVIEW_AUTH_FAILURES": "10000",
    }


def wait_listening(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, "uvicorn exited"
        try:
            httpx.get(f"{url}/tools", timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError(f"uvicorn did not listen within {START_TIMEOUT_S} s")


@contextmanager
def serving(tmp: Path, store_url: str, **settings: str) -> Iterator[Server]:
    """The tool server in a uvicorn process over the store at store_url, with callers,
    reviewers and a ledger in tmp and settings (`STREAM_ADAPTER_*`) added to its environment;
    stopped cleanly when the block ends."""
    callers, reviewers = tokens(tmp)
    env = {**server_env(tmp, store_url), **settings}
    port = _free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "examples.http_server:app"),
            *("--host", "127.0.0.1", "--port", str(port), "--no-access-log"),
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_listening(url, proc)
        yield Server(
            url,
            callers["agent-1"],
            callers["agent-2"],
            reviewers["rita"],
            reviewers["ann"],
            store_url,
            tmp / "ledger.jsonl",
            env,
        )
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
        # uvicorn re-raises the signal once it has shut down cleanly (lifespan included).
        assert "Application shutdown complete" in err.decode(), err.decode()[-2000:]


@pytest.fixture(scope="module")
def server(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    store_url = f"{redis_server}#http-{uuid.uuid4().hex[:12]}"
    with serving(tmp_path_factory.mktemp("http"), store_url) as running:
        yield running


@pytest.fixture
async def http(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def invoice(customer: str | None = None) -> dict[str, Any]:
    customer = customer or f"c-{uuid.uuid4().hex[:8]}"
    return {"tool": "send_invoice", "arguments": {"customer": customer, "amount_cents": 1250}}


def ledger_calls(server: Server, call_id: str) -> int:
    if not server.ledger.exists():
        return 0
    lines = server.ledger.read_text().splitlines()
    return sum(json.loads(line)["call_id"] == call_id for line in lines)


async def test_every_route_needs_the_right_token(server: Server, http: httpx.AsyncClient) -> None:
    routes = [
        ("GET", "/tools", server.agent, server.reviewer),
        ("POST", "/calls", server.agent, server.reviewer),
        ("POST", "/approvals/appr_x/resume", server.agent, server.reviewer),
        ("GET", "/approvals", server.reviewer, server.agent),
        ("GET", "/approvals/appr_x", server.reviewer, server.agent),
        ("POST", "/approvals/appr_x/decision", server.reviewer, server.agent),
        ("POST", "/approvals/appr_x/resolution", server.reviewer, server.agent),
    ]
    for method, path, _right, wrong in routes:
        for headers in ({}, bearer("sa1.nope.nope"), bearer(wrong), {"Authorization": "Basic x"}):
            answer = await http.request(method, path, headers=headers, json={})
            assert answer.status_code == 401, (method, path, headers)
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["kind"] == "Unauthenticated"
    listed = await http.get("/tools", headers=bearer(server.agent))
    assert listed.status_code == 200 and listed.headers["cache-control"] == "no-store"
    names = {tool["name"]: tool["confirm"] for tool in listed.json()["tools"]}
    assert names["send_invoice"] is True and names["echo"] is False
    assert "admin_reset" not in names  # outside TOOLS: not even listed
    assert (await http.get("/nowhere", headers=bearer(server.agent))).status_code == 404


async def test_calls_answer_replies_or_problems(server: Server, http: httpx.AsyncClient) -> None:
    auth = bearer(server.agent)
    ok = await http.post(
        "/calls", headers=auth, json={"tool": "add", "arguments": {"a": 2, "b": 3}}
    )
    assert ok.status_code == 200 and ok.json()["status"] == "ok" and ok.json()["result"] == 5
    cases = [
        ({"tool": "add", "arguments": {"a": "2", "b": 3}}, 422, "ToolUsageError"),
        ({"tool": "admin_reset", "arguments": {}}, 404, "ToolNotFound"),
        ({"tool": "echo", "arguments": {}, "approved": True}, 400, "ToolUsageError"),
        ({"approval_id": "appr_x"}, 400, "ToolUsageError"),  # resumes have their own route
        ({"tool": "boom", "arguments": {}}, 500, "ToolFailed"),
    ]
    for body, status, kind in cases:
        answer = await http.post("/calls", headers=auth, json=body)
        assert (answer.status_code, answer.json()["kind"]) == (status, kind), body
    broken = await http.post("/calls", headers=auth, content=b"{not json")
    assert broken.status_code == 400
    huge = await http.post("/calls", headers=auth, content=b" " * ((1 << 20) + 1))
    assert huge.status_code == 413
    assert (await http.get("/calls", headers=auth)).status_code == 405


async def test_an_idempotency_key_makes_a_retry_the_same_call(
    server: Server, http: httpx.AsyncClient
) -> None:
    key = uuid.uuid4().hex
    body = {"tool": "echo", "arguments": {"n": 1}}
    first = await http.post(
        "/calls", headers={**bearer(server.agent), "Idempotency-Key": key}, json=body
    )
    again = await http.post(
        "/calls", headers={**bearer(server.agent), "Idempotency-Key": key}, json=body
    )
    other = await http.post(
        "/calls", headers={**bearer(server.other_agent), "Idempotency-Key": key}, json=body
    )
    assert first.json()["call_id"] == again.json()["call_id"]
    assert other.json()["call_id"] != first.json()["call_id"]  # keys are per caller


async def test_a_parked_call_is_decided_by_a_reviewer_and_resumed_by_its_caller(
    server: Server, http: httpx.AsyncClient
) -> None:
    parked = await http.post("/calls", headers=bearer(server.agent), json=invoice())
    assert parked.status_code == 200 and parked.json()["status"] == "pending_approval"
    approval_id = parked.json()["approval_id"]
    resume = f"/approvals/{approval_id}/resume"
    early = await http.post(resume, headers=bearer(server.agent))
    assert early.json()["status"] == "pending_approval"
    # Another caller cannot see or resume it.
    assert (await http.post(resume, headers=bearer(server.other_agent))).status_code == 404
    pending = await http.get("/approvals?state=pending", headers=bearer(server.reviewer))
    assert approval_id in [r["approval_id"] for r in pending.json()["approvals"]]
    record = (await http.get(f"/approvals/{approval_id}", headers=bearer(server.reviewer))).json()
    assert record["origin"] == "http" and record["source"] == "http:agent-1"
    assert record["arguments"]["amount_cents"] == 1250  # what the reviewer decides on
    decision = f"/approvals/{approval_id}/decision"
    bad = await http.post(
        decision, headers=bearer(server.reviewer), json={"approved": True, "reviewer": "x"}
    )
    assert bad.status_code == 400  # the reviewer comes from the token only
    decided = await http.post(decision, headers=bearer(server.reviewer), json={"approved": True})
    assert decided.status_code == 200 and decided.json()["reviewer"] == "rita"
    late = await http.post(decision, headers=bearer(server.reviewer), json={"approved": False})
    assert late.status_code == 409
    done = await http.post(resume, headers=bearer(server.agent))
    assert done.status_code == 200 and done.json()["status"] == "ok"
    assert done.json()["result"] == {
        "invoiced": record["arguments"]["customer"],
        "amount_cents": 1250,
    }
    again = await http.post(resume, headers=bearer(server.agent))
    assert again.json()["status"] == "already_done" and again.json()["outcome"] == done.json()
    assert ledger_calls(server, record["call_id"]) == 1


async def test_concurrent_resumes_run_the_call_once(
    server: Server, http: httpx.AsyncClient
) -> None:
    parked = (await http.post("/calls", headers=bearer(server.agent), json=invoice())).json()
    approval_id = parked["approval_id"]
    await http.post(
        f"/approvals/{approval_id}/decision",
        headers=bearer(server.reviewer),
        json={"approved": True},
    )
    answers = await asyncio.gather(
        *(
            http.post(f"/approvals/{approval_id}/resume", headers=bearer(server.agent))
            for _ in range(20)
        )
    )
    # One runs it; every other resume meets that live run in this process, waits for it and
    # answers its outcome.
    assert all(a.status_code == 200 for a in answers), [a.json() for a in answers]
    replies = [a.json() for a in answers]
    ok = [r for r in replies if r["status"] == "ok"]
    assert len(ok) == 1, replies
    others = [r for r in replies if r is not ok[0]]
    assert all(r["status"] == "already_done" and r["outcome"] == ok[0] for r in others), others
    later = await http.post(f"/approvals/{approval_id}/resume", headers=bearer(server.agent))
    assert later.json()["status"] == "already_done", later.json()
    assert ledger_calls(server, parked["call_id"]) == 1


async def test_a_denied_call_answers_403_and_never_runs(
    server: Server, http: httpx.AsyncClient
) -> None:
    parked = (await http.post("/calls", headers=bearer(server.agent), json=invoice())).json()
    approval_id = parked["approval_id"]
    decided = await http.post(
        f"/approvals/{approval_id}/decision",
        headers=bearer(server.reviewer),
        json={"approved": False, "reason": "not this customer"},
    )
    assert decided.status_code == 200 and decided.json()["state"] == "denied"
    answer = await http.post(f"/approvals/{approval_id}/resume", headers=bearer(server.agent))
    assert answer.status_code == 403 and answer.json()["kind"] == "ApprovalDenied"
    assert "not this customer" not in answer.text  # the reason stays with the reviewers
    assert ledger_calls(server, parked["call_id"]) == 0


async def test_an_unknown_outcome_is_resolved_by_a_reviewer(
    server: Server, http: httpx.AsyncClient
) -> None:
    """A run that died with its server: not repeated (wire_funds is not idempotent) until a
    reviewer finds it did not run; then the caller's resume runs it, once."""
    call = {"tool": "wire_funds", "arguments": {"account": uuid.uuid4().hex, "amount_cents": 5}}
    parked = (await http.post("/calls", headers=bearer(server.agent), json=call)).json()
    approval_id = parked["approval_id"]
    resume = f"/approvals/{approval_id}/resume"
    resolution = f"/approvals/{approval_id}/resolution"
    await http.post(
        f"/approvals/{approval_id}/decision",
        headers=bearer(server.reviewer),
        json={"approved": True},
    )
    early = await http.post(resolution, headers=bearer(server.reviewer), json={"ran": False})
    assert early.status_code == 409  # only an unknown outcome is resolved
    # The server died mid-run long ago: the record is running, started 20 minutes back.
    store = store_from_url(server.store_url)
    try:
        running, won = await store.claim(approval_id)
        assert won
        stale = running.model_copy(update={"started_at": "2000-01-01T00:00:00.000Z"})
        assert await store._swap(stale, running)  # type: ignore[attr-defined]
    finally:
        await store.aclose()  # type: ignore[attr-defined]
    unknown = (await http.post(resume, headers=bearer(server.agent))).json()
    assert unknown["status"] == "already_done" and unknown["outcome"] == "unknown"
    assert ledger_calls(server, parked["call_id"]) == 0  # never repeated on its own
    bad = await http.post(resolution, headers=bearer(server.reviewer), json={"ran": "no"})
    assert bad.status_code == 400
    resolved = await http.post(resolution, headers=bearer(server.reviewer), json={"ran": False})
    assert resolved.status_code == 200 and resolved.json()["state"] == "approved"
    again = await http.post(resolution, headers=bearer(server.reviewer), json={"ran": True})
    assert again.status_code == 409
    ran = await http.post(resume, headers=bearer(server.agent))
    assert ran.json()["status"] == "ok"
    assert ledger_calls(server, parked["call_id"]) == 1


async def test_nobody_decides_their_own_call(server: Server, http: httpx.AsyncClient) -> None:
    callers = ReviewersFile(Path(server.env["STREAM_ADAPTER_CALLERS_FILE"]))
    ann_caller = callers.add("ann", replace=True)
    parked = (await http.post("/calls", headers=bearer(ann_caller), json=invoice())).json()
    approval_id = parked["approval_id"]
    own = await http.post(
        f"/approvals/{approval_id}/decision", headers=bearer(server.both), json={"approved": True}
    )
    assert own.status_code == 403 and own.json()["kind"] == "Forbidden"
    other = await http.post(
        f"/approvals/{approval_id}/decision",
        headers=bearer(server.reviewer),
        json={"approved": True},
    )
    assert other.status_code == 200


async def test_ids_of_another_callers_call_name_another_call(
    server: Server, http: httpx.AsyncClient
) -> None:
    """Two callers (two sources) using the same ids never share a record."""
    ids = {"run_id": f"run-{uuid.uuid4().hex}", "call_id": "call-1"}
    body = {**invoice(), **ids}
    mine = await http.post("/calls", headers=bearer(server.agent), json=body)
    assert mine.json()["status"] == "pending_approval"
    theirs = await http.post("/calls", headers=bearer(server.other_agent), json=body)
    assert theirs.json()["status"] == "pending_approval"
    assert theirs.json()["approval_id"] != mine.json()["approval_id"]
    other = {**invoice(), **ids, "arguments": {**invoice()["arguments"], "amount_cents": 7}}
    again = await http.post("/calls", headers=bearer(server.agent), json=other)
    assert again.status_code == 400 and again.json()["kind"] == "ToolUsageError"
    assert "approval_id" not in again.json()


async def test_queue_and_function_messages_naming_server_records_are_refused(
    server: Server, http: httpx.AsyncClient
) -> None:
    ids = {"run_id": f"run-{uuid.uuid4().hex}", "call_id": "call-1"}
    body = {**invoice(), **ids}
    parked = (await http.post("/calls", headers=bearer(server.agent), json=body)).json()
    approval_id = parked["approval_id"]
    await http.post(
        f"/approvals/{approval_id}/decision",
        headers=bearer(server.reviewer),
        json={"approved": True},
    )
    store = store_from_url(server.store_url)
    try:
        queue = build_backend(store=store, topology="topologies.demo")
        with pytest.raises(ToolUsageError):
            await handle_envelope(queue.executor, {"approval_id": approval_id})
        # The same ids from another source are another call, with a record of its own.
        own = await handle_envelope(queue.executor, body)
        assert own["status"] == "pending_approval" and own["approval_id"] != approval_id
    finally:
        await store.aclose()  # type: ignore[attr-defined]
    # A function host (its own process, its own loop) refuses it too: the SQS message fails.
    code = (
        "import json, sys\n"
        "from examples.serverless import handler\n"
        "print(json.dumps(handler(json.loads(sys.argv[1]))))\n"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code, json.dumps(sqs_event([{"approval_id": approval_id}]))],
        env=server.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(json.loads(done.stdout)["batchItemFailures"]) == 1
    assert ledger_calls(server, parked["call_id"]) == 0
    ran = await http.post(f"/approvals/{approval_id}/resume", headers=bearer(server.agent))
    assert ran.json()["status"] == "ok"  # the server itself resumes it


# -- Lambda: Mangum with API Gateway v2 events --------------------------------------------------


def apigw_v2(
    method: str,
    path: str,
    token: str | None,
    body: Any = None,
    *,
    base64_body: bool = False,
    query: str = "",
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload format 2.0) event."""
    headers = {"content-type": "application/json", "host": "tools.example.test"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    raw = None if body is None else json.dumps(body)
    if raw is not None and base64_body:
        raw = base64.b64encode(raw.encode()).decode()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api1",
            "domainName": "tools.example.test",
            "domainPrefix": "tools",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "192.0.2.10",
                "userAgent": "agent",
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2025:00:00:00 +0000",
            "timeEpoch": 1735689600000,
        },
        "body": raw,
        "isBase64Encoded": base64_body,
    }


def lambda_invocations(env: dict[str, str], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Invoke the Lambda handler with events, warm, in one fresh container (a child process)."""
    done = subprocess.run(
        [sys.executable, str(STEPS)],
        input=json.dumps(events),
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    responses: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return responses


def body_of(response: dict[str, Any]) -> Any:
    raw = response["body"]
    if response.get("isBase64Encoded"):
        raw = base64.b64decode(raw).decode()
    return json.loads(raw)


def test_lambda_with_api_gateway_v2_events(redis_server: str, tmp_path: Path) -> None:
    callers, reviewers = tokens(tmp_path)
    env = server_env(tmp_path, f"{redis_server}#lambda-{uuid.uuid4().hex[:12]}")
    agent, rita = callers["agent-1"], reviewers["rita"]
    call = invoice()
    first = lambda_invocations(
        env,
        [
            apigw_v2("POST", "/calls", None, {"tool": "echo", "arguments": {}}),
            apigw_v2("POST", "/calls", agent, {"tool": "echo", "arguments": {"x": 1}}),
            apigw_v2(
                "POST",
                "/calls",
                agent,
                {"tool": "add", "arguments": {"a": 1, "b": 2}},
                base64_body=True,
            ),
            apigw_v2("POST", "/calls", agent, call),
        ],
    )
    assert first[0]["statusCode"] == 401 and "Bearer" in first[0]["headers"]["www-authenticate"]
    assert first[1]["statusCode"] == 200 and body_of(first[1])["result"] == {"x": 1}
    assert body_of(first[2])["result"] == 3
    parked = body_of(first[3])
    assert parked["status"] == "pending_approval"
    approval_id = parked["approval_id"]
    # Another container decides, lists and resumes (the store is shared, the loop is not).
    second = lambda_invocations(
        env,
        [
            apigw_v2("GET", "/approvals", rita, query="state=pending"),
            apigw_v2("POST", f"/approvals/{approval_id}/decision", rita, {"approved": True}),
            apigw_v2("POST", f"/approvals/{approval_id}/resume", agent),
            apigw_v2("POST", f"/approvals/{approval_id}/resume", agent),
        ],
    )
    assert [r["approval_id"] for r in body_of(second[0])["approvals"]] == [approval_id]
    assert second[1]["statusCode"] == 200
    assert body_of(second[2])["status"] == "ok"
    assert body_of(second[3])["status"] == "already_done"
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["call_id"] for line in lines] == [parked["call_id"]]


# -- mounted in FastAPI -------------------------------------------------------------------------


async def test_mounted_in_fastapi(tmp_path: Path) -> None:
    from fastapi import FastAPI

    callers, _ = tokens(tmp_path)
    backend = build_backend(store=MemoryApprovalStore(), topology="topologies.demo")
    tools_app = create_app(
        backend, callers=tmp_path / "callers.json", reviewers=tmp_path / "reviewers.json"
    )
    outer = FastAPI()

    @outer.get("/health")
    async def health() -> dict[str, str]:
        return {"ok": "yes"}

    outer.mount("/agent-tools", tools_app)
    transport = httpx.ASGITransport(app=outer)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        assert (await client.get("/health")).json() == {"ok": "yes"}
        unauth = await client.post("/agent-tools/calls", json={"tool": "echo", "arguments": {}})
        assert unauth.status_code == 401
        answer = await client.post(
            "/agent-tools/calls",
            headers=bearer(callers["agent-1"]),
            json={"tool": "echo", "arguments": {"m": 1}},
        )
        assert answer.json()["result"] == {"m": 1}
    await tools_app.state.tool_server.close()  # a mounted app's lifespan is the host's to run


def test_tokens_are_checked_against_the_file_as_it_is_now(tmp_path: Path) -> None:
    """A remembered token stops working as soon as its name is removed or re-issued."""
    from stream_adapter.hosts.http import BearerTokens
    from stream_adapter.review.auth import Unauthenticated

    file = ReviewersFile(tmp_path / "callers.json")
    token = file.add("agent-1")
    tokens_ = BearerTokens(file)
    assert asyncio.run(tokens_.name_of(f"Bearer {token}")) == "agent-1"
    assert asyncio.run(tokens_.name_of(f"Bearer {token}")) == "agent-1"  # remembered
    file.add("agent-1", replace=True)
    with pytest.raises(Unauthenticated):
        asyncio.run(tokens_.name_of(f"Bearer {token}"))
    again = file.add("agent-2")
    assert asyncio.run(tokens_.name_of(f"bearer {again}")) == "agent-2"
    file.remove("agent-2")
    with pytest.raises(Unauthenticated):
        asyncio.run(tokens_.name_of(f"Bearer {again}"))


def test_create_app_needs_the_http_extra_only_when_used() -> None:
    code = (
        "import sys, stream_adapter\n"
        "assert 'starlette' not in sys.modules\n"
        "sys.modules['starlette'] = None\n"
        "try:\n    stream_adapter.create_app\n"
        "except ImportError as exc:\n    assert \"'http' extra\" in str(exc), exc\n"
        "else:\n    raise SystemExit('imported')\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def test_tool_handler_and_server_share_one_store_without_sharing_records(tmp_path: Path) -> None:
    """A call parked by a function host is not the server's: resuming it over HTTP is a 404."""
    store = MemoryApprovalStore()
    backend = build_backend(store=store, topology="topologies.demo")
    parked = tool_handler(backend.executor)(invoice())
    assert parked["status"] == "pending_approval"
    callers, _ = tokens(tmp_path)
    app = create_app(
        backend, callers=tmp_path / "callers.json", reviewers=tmp_path / "reviewers.json"
    )

    async def resume() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            return await client.post(
                f"/approvals/{parked['approval_id']}/resume", headers=bearer(callers["agent-1"])
            )

    answer = asyncio.run(resume())
    assert answer.status_code == 404 and answer.json()["kind"] == "ApprovalNotFound"
