"""`stream-adapter mcp` as a real process, driven by the official MCP SDK's client over stdio and
streamable HTTP, against a real broker, worker and review service."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import aiohttp
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from stream_adapter.ops.mcp import READY
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from stream_adapter_dev.broker.local import free_port
from tests.harness import ROOT, CliProcess, WorkerProcess, make_settings
from tests.integration.review_support import Api, ReviewProcess, add_reviewer

pytestmark = pytest.mark.integration

DEMO = {"echo", "add", "sleep", "flaky", "boom", "send_invoice", "wire_funds"}


@dataclass
class McpHttpProcess(CliProcess):
    """`stream-adapter mcp --transport http` on a free port."""

    command: ClassVar[str] = "mcp"
    ready_line: ClassVar[str] = READY

    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


@dataclass
class Stack:
    settings: Settings
    review: ReviewProcess
    reviewer_token: str
    http: McpHttpProcess
    caller_token: str


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("mcp")
    settings = make_settings(kafka_bootstrap, tmp, reviewers_file=tmp / "reviewers.json")
    asyncio.run(create_topics(settings))
    reviewer_token = add_reviewer(settings, "ann")
    callers = settings.with_changes(reviewers_file=tmp / "callers.json")
    caller_token = add_reviewer(callers, "alice")
    worker = WorkerProcess(settings, tmp / "work").start()
    review = ReviewProcess(settings, tmp / "review").start()
    args = ("--transport", "http", "--callers-file", str(tmp / "callers.json"))
    http = McpHttpProcess(settings, tmp / "mcp", args=args)
    http.args = (*args, "--port", str(http.port), "--review-url", review.url)
    http.start()
    try:
        asyncio.run(worker.ready())
        asyncio.run(review.ready())
        asyncio.run(http.ready())
        yield Stack(settings, review, reviewer_token, http, caller_token)
    finally:
        for process in (http, review, worker):
            process.kill()


@asynccontextmanager
async def session_over(stack: Stack, transport: str) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with the server over transport."""
    if transport == "stdio":
        env = {**os.environ, **stack.settings.to_env()}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "stream_adapter",
                "mcp",
                "--caller",
                "bob",
                "--review-url",
                stack.review.url,
            ],
            env=env,
            cwd=str(ROOT),
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session
        return
    headers = {"Authorization": f"Bearer {stack.caller_token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(stack.http.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.fixture
async def review_api(stack: Stack) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as http:
        yield Api(http, stack.review.url, stack.reviewer_token)


TRANSPORTS = ["stdio", "http"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_list_call_and_error(stack: Stack, transport: str) -> None:
    async with session_over(stack, transport) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(listed) == DEMO
        invoice = listed["send_invoice"]
        assert invoice.annotations is not None and invoice.annotations.destructive_hint is True
        assert invoice.annotations.idempotent_hint is True
        assert listed["add"].input_schema["required"] == ["a", "b"]
        assert listed["echo"].output_schema is not None

        added = await session.call_tool("add", {"a": 2, "b": 3})
        assert not added.is_error
        assert added.structured_content == {"result": 5}
        assert added.content[0].text == "5"  # type: ignore[union-attr]

        echoed = await session.call_tool("echo", {"x": [1, 2]})
        assert echoed.structured_content == {"x": [1, 2]}

        failed = await session.call_tool("boom", {})
        assert failed.is_error and failed.structured_content is not None
        assert failed.structured_content["kind"] == "ToolFailed"
        bad = await session.call_tool("add", {"a": "x", "b": 1})
        assert bad.is_error and bad.structured_content is not None
        assert bad.structured_content["status"] == 422
        unknown = await session.call_tool("admin_reset", {})
        assert unknown.is_error and unknown.structured_content is not None
        assert unknown.structured_content["kind"] == "ToolNotFound"


async def decide_from_progress(
    api: Api, messages: asyncio.Queue[str], approved: bool
) -> dict[str, Any]:
    """Wait for the progress message naming the approval; decide it through the review API."""
    message = await asyncio.wait_for(messages.get(), 60)
    found = re.search(r"approval (\S+) at (\S+)", message)
    assert found is not None, message
    approval_id, page = found.groups()
    assert page.endswith(f"/approvals/{approval_id}")
    record = await api.wait_listed(approval_id)
    path = f"/api/approvals/{approval_id}/decision"
    status, body = await api.request("POST", path, json={"approved": approved})
    assert status == 200, body
    return record


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("approved", [True, False])
async def test_a_confirm_call_waits_for_a_reviewer(
    stack: Stack, review_api: Api, transport: str, approved: bool
) -> None:
    messages: asyncio.Queue[str] = asyncio.Queue()

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        messages.put_nowait(message or "")

    async with session_over(stack, transport) as session:
        call = asyncio.create_task(
            session.call_tool(
                "send_invoice",
                {"customer": f"mcp-{transport}", "amount_cents": 700},
                progress_callback=progress,
            )
        )
        record = await decide_from_progress(review_api, messages, approved)
        result = await asyncio.wait_for(call, 60)
    caller = "bob" if transport == "stdio" else "alice"
    assert record["run_id"].startswith(f"mcp:{caller}:")
    if approved:
        assert not result.is_error
        assert result.structured_content == {"invoiced": f"mcp-{transport}", "amount_cents": 700}
    else:
        assert result.is_error and result.structured_content is not None
        assert result.structured_content["kind"] == "ApprovalDenied"


async def test_http_needs_a_callers_bearer_token(stack: Stack) -> None:
    async with aiohttp.ClientSession() as http:
        for headers in ({}, {"Authorization": "Bearer nope"}):
            async with http.post(stack.http.url, json={}, headers=headers) as response:
                assert response.status == 401
                assert response.headers["WWW-Authenticate"] == "Bearer"


async def approve_pending_of(api: Api, caller: str, stop: asyncio.Event) -> list[str]:
    """Approve, through the review API, every pending approval whose run is caller's."""
    approved: list[str] = []
    while not stop.is_set():
        status, body = await api.request("GET", "/api/approvals?state=pending")
        assert status == 200, body
        for record in body["approvals"]:
            if record["run_id"].startswith(f"mcp:{caller}:"):
                path = f"/api/approvals/{record['approval_id']}/decision"
                done, _ = await api.request("POST", path, json={"approved": True})
                if done == 200:
                    approved.append(record["approval_id"])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)
    return approved


async def test_pydantic_ai_agent_completes_a_run_through_the_mcp_server(
    stack: Stack, review_api: Api
) -> None:
    """pydantic-ai's own MCP client (FastMCP over streamable HTTP), driven by TestModel,
    which calls every tool it is given: one plain, one that needs a reviewer."""
    from fastmcp.client import Client as FastMCPClient
    from fastmcp.client.transports import StreamableHttpTransport
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.test import TestModel

    headers = {"Authorization": f"Bearer {stack.caller_token}"}
    toolset = MCPToolset(FastMCPClient(StreamableHttpTransport(stack.http.url, headers=headers)))
    model = TestModel(call_tools=["add", "send_invoice"])
    agent = Agent(model, toolsets=[toolset])
    stop = asyncio.Event()
    approver = asyncio.create_task(approve_pending_of(review_api, "alice", stop))
    try:
        async with agent:
            result = await asyncio.wait_for(agent.run("add, then invoice"), 120)
    finally:
        stop.set()
    approved = await approver
    assert len(approved) == 1
    returns = {
        part.tool_name: part.content
        for message in result.all_messages()
        for part in message.parts
        if part.part_kind == "tool-return"
    }
    assert set(returns) == {"add", "send_invoice"}
    assert returns == {"add": 0, "send_invoice": {"invoiced": "a", "amount_cents": 0}}
