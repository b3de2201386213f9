"""A third-party MCP server's tools run by a real worker: governed by confirm, reviewed, once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from stream_adapter.client import ToolClient
from stream_adapter.core.errors import ApprovalDenied, ToolFailed
from stream_adapter.core.replies import Reply
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from tests.harness import Client, WorkerProcess, make_settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def governed(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Path]]:
    tmp = tmp_path_factory.mktemp("mcp-tools")
    settings = make_settings(kafka_bootstrap, tmp, topology="tests.topologies.mcp_source")
    asyncio.run(create_topics(settings))
    runs = tmp / "runs.jsonl"
    worker = WorkerProcess(settings, tmp / "work", {"MCP_FILES_RUNS": str(runs)}).start()
    try:
        asyncio.run(worker.ready())
        yield settings, runs
    finally:
        worker.kill()


@pytest.fixture
async def tools(governed: tuple[Settings, Path]) -> AsyncIterator[ToolClient]:
    async with ToolClient(governed[0]) as client:
        yield client


@pytest.fixture
async def agent(governed: tuple[Settings, Path]) -> AsyncIterator[Client]:
    async with Client(governed[0]) as client:
        yield client


def runs_of(path: Path, tool: str) -> list[dict[str, object]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [run for run in map(json.loads, lines) if run["tool"] == tool]


async def test_a_plain_mcp_tool_runs_through_the_worker(
    tools: ToolClient, governed: tuple[Settings, Path]
) -> None:
    reply = await tools.call("files_shout", {"text": "hi"}, timeout_s=60)
    assert reply["result"] == {"result": "HI"}
    assert runs_of(governed[1], "shout") == [{"tool": "shout", "text": "hi"}]


async def test_a_confirmed_mcp_tool_runs_once_and_only_after_approval(
    tools: ToolClient, agent: Client, governed: tuple[Settings, Path]
) -> None:
    runs = governed[1]

    async def approve(reply: Reply) -> None:
        assert runs_of(runs, "delete_file") == []  # parked: nothing ran yet
        await agent.decide(reply["approval_id"], True)

    reply = await tools.call(
        "files_delete_file", {"name": "a.txt"}, on_pending=approve, timeout_s=60
    )
    assert reply["result"] == {"deleted": "a.txt"}
    assert runs_of(runs, "delete_file") == [{"tool": "delete_file", "name": "a.txt"}]

    async def deny(reply: Reply) -> None:
        await agent.decide(reply["approval_id"], False)

    with pytest.raises(ApprovalDenied):
        await tools.call("files_delete_file", {"name": "b.txt"}, on_pending=deny, timeout_s=60)
    assert [run["name"] for run in runs_of(runs, "delete_file")] == ["a.txt"]


async def test_an_mcp_tool_error_is_a_tool_failed_without_its_text(tools: ToolClient) -> None:
    with pytest.raises(ToolFailed) as failed:
        await tools.call("files_fail", {}, timeout_s=60)
    assert "secret" not in failed.value.detail
    assert failed.value.reply is not None and "secret" not in json.dumps(failed.value.reply)


def test_the_mcp_tools_keep_their_schemas(governed: tuple[Settings, Path]) -> None:
    from stream_adapter.core.frameworks import tool_definitions
    from tests.topologies.mcp_source import registry

    listed = {d["name"]: d for d in tool_definitions(registry, "mcp")}
    assert set(listed) == {"files_shout", "files_delete_file", "files_fail"}
    assert listed["files_shout"]["inputSchema"]["required"] == ["text"]
    assert listed["files_delete_file"]["annotations"]["destructiveHint"] is True
