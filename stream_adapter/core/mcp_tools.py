"""Another MCP server's tools as tools of a registry: governance for any MCP server.

`include_mcp_server(registry, server, confirm=...)` lists the tools of an MCP server, a stdio
command or a streamable-HTTP URL, and registers each as a tool whose call is that server's
`tools/call`. They are tools like any other: a `confirm` one runs only once a reviewer
approves, at most once, with the audit trail and metrics of every call.

The server's tools are listed once, when the registry is built (the topology is imported). Each
event loop keeps one connection to the server, opened on its first call and opened again after
a failure. The tool's input schema is the server's own (`frameworks.arguments_schema` reads it
from the function's `input_schema`); the server validates the arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from stream_adapter.core.runners import LoopLocal
from stream_adapter.core.tools import Tool, ToolRegistry

__all__ = ["McpServerTools", "McpToolError", "include_mcp_server"]


class McpToolError(RuntimeError):
    """The MCP server answered `isError`; its text stays here, off the reply (ToolFailed)."""


class _Connection:
    """One MCP client session held open by a task of its own (anyio scopes stay in one task)."""

    def __init__(self, source: McpServerTools) -> None:
        self._source = source
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._lock = asyncio.Lock()

    async def session(self) -> Any:
        async with self._lock:
            if self._task is None or self._task.done():
                ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                self._closing = asyncio.Event()
                self._task = asyncio.create_task(self._hold(ready), name="mcp-tools")
                self._session = await ready
            return self._session

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        try:
            async with self._source.session() as session:
                ready.set_result(session)
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError("closed"))
            if not isinstance(exc, Exception):
                raise

    def reset(self) -> None:
        """Drop the session (after a failure): the next call connects again."""
        self._closing.set()
        self._task = None


class McpServerTools:
    """An MCP server, by stdio command or URL, and a connection to it per event loop."""

    def __init__(
        self,
        server: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.server = server
        self.env = dict(env) if env is not None else None
        self.headers = dict(headers or {})
        self._connections: LoopLocal[_Connection] = LoopLocal(lambda: _Connection(self))

    @contextlib.asynccontextmanager
    async def session(self) -> Any:
        """A new, initialized MCP client session with the server."""
        from mcp import ClientSession

        async with contextlib.AsyncExitStack() as stack:
            if isinstance(self.server, str):
                from mcp.client.streamable_http import streamable_http_client
                from mcp.shared._httpx_utils import create_mcp_http_client

                http = await stack.enter_async_context(create_mcp_http_client(self.headers))
                read, write = await stack.enter_async_context(
                    streamable_http_client(self.server, http_client=http)
                )
            else:
                from mcp.client.stdio import StdioServerParameters, stdio_client

                command, *args = self.server
                params = StdioServerParameters(command=command, args=args, env=self.env)
                read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            yield session

    def list_tools(self) -> list[Any]:
        """The server's tools (`mcp.types.Tool`), listed on a loop of its own."""
        found: list[Any] = []

        async def listing() -> None:
            async with self.session() as session:
                found.extend((await session.list_tools()).tools)

        failure: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(listing())
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=run, name="mcp-tools-list")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return found

    async def call(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """The server's result for one call; McpToolError for an `isError` one."""
        connection = self._connections.get()
        session = await connection.session()
        try:
            result = await session.call_tool(name, dict(arguments))
        except Exception:
            connection.reset()
            raise
        if result.is_error:
            raise McpToolError(_text(result.content))
        if result.structured_content is not None:
            return result.structured_content
        return _value(result.content)


def _text(content: Sequence[Any]) -> str:
    return "\n".join(str(getattr(item, "text", "")) for item in content)


def _value(content: Sequence[Any]) -> Any:
    """A result without structured content: one text item's JSON (or the text), else a list."""
    if len(content) == 1 and getattr(content[0], "type", None) == "text":
        text = str(content[0].text)
        try:
            return json.loads(text)
        except ValueError:
            return text
    return [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in content]


def _tool_function(source: McpServerTools, listed: Any) -> Callable[..., Any]:
    name = str(listed.name)

    async def call(**arguments: Any) -> Any:
        return await source.call(name, arguments)

    call.__name__ = name
    call.__doc__ = listed.description or f"The MCP tool {name}."
    call.input_schema = dict(listed.input_schema)  # type: ignore[attr-defined]
    return call


def include_mcp_server(
    registry: ToolRegistry,
    server: str | Sequence[str],
    *,
    confirm: bool | Collection[str] = False,
    idempotent: Collection[str] = (),
    timeout_s: float | None = 60.0,
    prefix: str = "",
    only: Collection[str] | None = None,
    env: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> list[str]:
    """Register the tools of an MCP server (a command list for stdio, or a URL) in registry.

    `confirm` is True (every tool needs a reviewer) or the names that do; `idempotent` names
    the tools that may run again after a crash; `prefix` goes before each name; `only` limits
    which tools are taken. Returns the registered names.
    """
    source = McpServerTools(server, env=env, headers=headers)
    names = []
    for listed in source.list_tools():
        if only is not None and listed.name not in only:
            continue
        needs = confirm if isinstance(confirm, bool) else listed.name in confirm
        tool = Tool(
            prefix + listed.name,
            _tool_function(source, listed),
            confirm=needs,
            timeout_s=timeout_s,
            idempotent=listed.name in idempotent,
        )
        registry.register(tool)
        names.append(tool.name)
    return names
