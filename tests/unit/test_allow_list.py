"""`tools=` is a collection of names: a bare str is refused (at run time and by mypy) instead of
being read as its characters or substrings, which let `tools="delete_all_logs"` run `delete_all`."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api

from stream_adapter import (
    Executor,
    MemoryApprovalStore,
    ToolNotFound,
    ToolRegistry,
    handle_envelope,
    tool_handler,
)
from stream_adapter.settings import Settings
from tests.harness import ROOT

BARE = ["delete_all_logs", b"delete_all_logs", bytearray(b"delete_all_logs")]
DELETE_ALL = {"tool": "delete_all", "arguments": {}}


class Deletes:
    def __init__(self) -> None:
        self.ran: list[str] = []
        registry = ToolRegistry()

        @registry.tool
        async def delete_all() -> None:
            self.ran.append("delete_all")

        @registry.tool
        async def delete_all_logs() -> None:
            self.ran.append("delete_all_logs")

        @registry.tool
        async def d() -> None:
            self.ran.append("d")

        self.registry = registry


@pytest.mark.parametrize("tools", BARE, ids=type)
def test_executor_refuses_a_bare_string(tools: Any) -> None:
    with pytest.raises(TypeError, match="collection of tool names"):
        Executor(Deletes().registry, tools=tools)


@pytest.mark.parametrize("tools", BARE, ids=type)
@pytest.mark.parametrize("name", ["delete_all", "d", "delete_all_logs"])
async def test_handle_envelope_refuses_a_bare_string(tools: Any, name: str) -> None:
    deletes = Deletes()
    executor = Executor(deletes.registry, MemoryApprovalStore())
    with pytest.raises(TypeError):
        await handle_envelope(executor, {"tool": name, "arguments": {}}, tools=tools)
    assert deletes.ran == []


@pytest.mark.parametrize("tools", BARE, ids=type)
def test_tool_handler_refuses_a_bare_string_when_built(tools: Any) -> None:
    with pytest.raises(TypeError):
        tool_handler(Executor(Deletes().registry), tools=tools)


@pytest.mark.parametrize("tools", BARE, ids=type)
def test_build_app_refuses_a_bare_string(tools: Any, tmp_path: Path) -> None:
    from stream_adapter.stream.app import build_app

    settings = Settings.for_app("allow-list", data_dir=tmp_path)
    with pytest.raises(TypeError):
        build_app(settings, Executor(Deletes().registry), tools=tools)


@pytest.mark.parametrize(
    "tools", [[1], {"ok", None}, ("ok", b"delete_all")], ids=lambda tools: type(tools).__name__
)
def test_names_must_be_strings(tools: Any) -> None:
    with pytest.raises(TypeError, match="tool names"):
        Executor(Deletes().registry, tools=tools)


@pytest.mark.parametrize(
    "tools", [["delete_all_logs"], {"delete_all_logs"}, ("delete_all_logs",), frozenset()]
)
async def test_collections_match_whole_names_only(tools: Any) -> None:
    deletes = Deletes()
    executor = Executor(deletes.registry, MemoryApprovalStore(), tools=tools)
    for name in ("delete_all", "d", "delete", "logs"):
        with pytest.raises(ToolNotFound):
            await handle_envelope(executor, {"tool": name, "arguments": {}})
        with pytest.raises(ToolNotFound):
            await handle_envelope(
                Executor(deletes.registry), {"tool": name, "arguments": {}}, tools=tools
            )
    if tools:
        await handle_envelope(executor, {"tool": "delete_all_logs", "arguments": {}})
    assert deletes.ran == (["delete_all_logs"] if tools else [])


def test_mypy_catches_a_bare_string(tmp_path: Path) -> None:
    source = tmp_path / "uses_tools.py"
    source.write_text(
        textwrap.dedent(
            """
            from stream_adapter import Executor, ToolRegistry, handle_envelope, tool_handler
            from stream_adapter.stream.app import build_app
            from stream_adapter.settings import Settings

            registry = ToolRegistry()
            Executor(registry, tools="delete_all_logs")
            Executor(registry, tools=["delete_all_logs"])
            tool_handler(Executor(registry), tools="delete_all_logs")
            build_app(Settings(), Executor(registry), tools="delete_all_logs")

            async def call() -> None:
                await handle_envelope(Executor(registry), {}, tools="delete_all_logs")
            """
        )
    )
    out, _, status = mypy_api.run(
        ["--strict", "--no-error-summary", "--cache-dir", str(ROOT / ".mypy_cache"), str(source)]
    )
    errors = [line for line in out.splitlines() if f"{source.name}:" in line]
    assert status == 1, out
    lines = sorted({int(line.split(":")[1]) for line in errors})
    assert lines == [7, 9, 10, 13], out


def test_a_topologys_tools_list_refuses_a_bare_string() -> None:
    """`stream-adapter tools` reads a topology's TOOLS: a str is a configuration error."""
    from types import ModuleType

    from stream_adapter.commands.tools import topology_tools
    from stream_adapter.core.errors import ConfigError

    module = ModuleType("bare_topology")
    module.registry = Deletes().registry  # type: ignore[attr-defined]
    module.TOOLS = "delete_all_logs"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="TOOLS"):
        topology_tools(module)
    module.TOOLS = ["delete_all_logs"]  # type: ignore[attr-defined]
    assert [tool.name for tool in topology_tools(module)] == ["delete_all_logs"]


@pytest.mark.parametrize("tools", BARE, ids=type)
def test_build_backend_and_the_http_server_refuse_a_bare_string(tools: Any, tmp_path: Path) -> None:
    from stream_adapter.hosts.backend import build_backend
    from stream_adapter.hosts.http.app import create_app

    deletes = Deletes()
    with pytest.raises(TypeError):
        build_backend(deletes.registry, tools=tools)
    with pytest.raises(TypeError):
        build_backend(store=MemoryApprovalStore(), topology="topologies.demo", tools=tools)
    backend = build_backend(deletes.registry)
    with pytest.raises(TypeError):
        create_app(
            backend,
            callers=tmp_path / "callers.json",
            reviewers=tmp_path / "reviewers.json",
            tools=tools,
        )
