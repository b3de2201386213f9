"""An MCP server over a topology's tools: each `tools/call` is a call on Kafka, through ToolClient.

`tools/list` comes from the registry (`frameworks.tool_definitions(..., "mcp")`): `confirm`
tools carry `destructiveHint` and say a reviewer approves each call; idempotent tools carry
`idempotentHint`. While a call waits for a reviewer, the MCP client gets a progress
notification naming the approval and its review page. The final reply is the tool result
(structured content plus its JSON text); an `error` reply is an `isError` result carrying the
problem object (contract §6).

Who called goes into the call's run_id (`mcp:<caller>:<random>`) and its `caller` header: over
stdio the `--caller` given, over HTTP the name the bearer token belongs to.

Cancelling a `tools/call` (the MCP client's `notifications/cancelled`) stops the wait only:
a call on Kafka cannot be unsent, and the worker runs it and writes its reply. A pending
approval cannot be withdrawn either: a reviewer denies it, or it expires
(`PENDING_EXPIRY_S`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import quote

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from stream_adapter.client import ToolClient
from stream_adapter.core.errors import AdapterError, ToolNotFound, problem
from stream_adapter.core.frameworks import tool_definitions
from stream_adapter.core.ids import fresh_id
from stream_adapter.core.replies import Reply
from stream_adapter.core.tools import Tool

__all__ = ["CALLER_HEADER", "build_server", "call_result", "error_result", "run_id_for"]

log = logging.getLogger(__name__)

CALLER_HEADER = "caller"
"""The Kafka header naming who made a call through the MCP server."""

CallerOf = Callable[[ServerRequestContext[Any, Any]], Awaitable[str]]


def run_id_for(caller: str) -> str:
    """A fresh run_id naming the caller, so reviewers and the audit trail see who asked."""
    return f"mcp:{caller[:64]}:{fresh_id()}"


def call_result(reply: Reply) -> types.CallToolResult:
    """A final ok (or already_done) reply as the MCP tool result: structured plus text."""
    result = reply.get("result") if reply.get("status") == "ok" else reply
    structured = result if isinstance(result, dict) else {"result": result}
    text = json.dumps(result, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=False,
    )


def error_result(exc: AdapterError) -> types.CallToolResult:
    """An error as an isError result carrying its problem object (the reply's own, if any)."""
    body = exc.reply.get("error") if exc.reply is not None else None
    found = body if isinstance(body, dict) else problem(exc)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(found, ensure_ascii=False))],
        structured_content=found,
        is_error=True,
    )


def build_server(
    tools: Iterable[Tool],
    client: ToolClient,
    *,
    caller_of: CallerOf,
    review_url: str,
    timeout_s: float | None = None,
) -> Server[Any]:
    """The MCP server of tools, calling them through client (started by whoever serves it)."""
    listed = list(tools)
    names = {tool.name for tool in listed}
    definitions = [types.Tool.model_validate(d) for d in tool_definitions(listed, "mcp")]

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=definitions)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in names:  # the worker would answer the same: no need to ask it
            return error_result(ToolNotFound(f"unknown tool {params.name[:100]!r}"))
        caller = await caller_of(ctx)

        async def pending(reply: Reply) -> None:
            approval = str(reply.get("approval_id", ""))
            page = f"{review_url}approvals/{quote(approval, safe='')}"
            await ctx.session.report_progress(
                0, None, f"waiting for a reviewer: approval {approval} at {page}"
            )

        try:
            reply = await client.call(
                params.name,
                dict(params.arguments or {}),
                run_id=run_id_for(caller),
                headers={CALLER_HEADER: caller.encode()},
                timeout_s=timeout_s,
                on_pending=pending,
            )
        except AdapterError as exc:
            return error_result(exc)
        return call_result(reply)

    return Server(
        "stream-adapter",
        instructions=(
            "Tools run by a stream-adapter worker. Tools marked destructive wait for a person "
            "to approve each call; progress notifications name the approval and its page."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def fixed_caller(name: str) -> CallerOf:
    """Every call comes from name (stdio: one local user per process)."""

    async def caller(ctx: ServerRequestContext[Any, Any]) -> str:
        return name

    return caller


def request_caller(ctx: ServerRequestContext[Any, Any]) -> str:
    """The caller the HTTP bearer check put on this request's scope."""
    request: Any = ctx.request
    scope: MutableMapping[str, Any] = getattr(request, "scope", {}) or {}
    return str(scope.get("state", {}).get(CALLER_HEADER) or "unknown")
