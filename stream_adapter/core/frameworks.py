"""Tool definitions for agent frameworks, and their tool calls and results as our messages.

`tool_definitions(tools, "openai" | "anthropic" | "mcp")` gives what each framework's API
takes as its tool list, from the registry (names, descriptions, JSON schemas, and for MCP the
annotations: `confirm` tools are destructive and need a reviewer, idempotent tools say so).
`envelope_from_tool_call` turns the model's tool-call item into a call envelope whose
call_id is the item's id; `tool_result_message` turns our reply into the result message the
model expects next. Pure functions: nothing here talks to Kafka.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import TypeAdapter

from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.errors import ToolUsageError
from stream_adapter.core.executor import Executor
from stream_adapter.core.ids import fresh_id
from stream_adapter.core.replies import Reply, is_final
from stream_adapter.core.tools import Tool, ToolRegistry

__all__ = [
    "CONFIRM_META",
    "Format",
    "arguments_schema",
    "description",
    "envelope_from_tool_call",
    "output_schema",
    "tool_definitions",
    "tool_result_message",
]

Format = Literal["openai", "anthropic", "mcp"]
"""openai: Chat Completions `tools` items; anthropic: Messages `tools` items; mcp: `tools/list`
entries."""

CONFIRM_META = "stream-adapter/confirm"
"""The `_meta` key of an MCP tool entry saying a reviewer must approve each call."""

_CONFIRM_NOTE = "Each call waits until a person approves it; a denied call fails."


def arguments_schema(tool: Tool) -> dict[str, Any]:
    """The JSON schema of the tool's arguments, by their real names (a function taking
    `**arguments` may declare its schema as its `input_schema` attribute, as MCP tools do)."""
    declared = getattr(tool.fn, "input_schema", None)
    if tool.takes_anything and isinstance(declared, dict):
        return dict(declared)
    if tool.takes_anything:
        return {"type": "object", "additionalProperties": True}
    schema = tool.args_model.model_json_schema(by_alias=True)
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def output_schema(tool: Tool) -> dict[str, Any] | None:
    """The JSON schema of the tool's result when its return annotation declares an object
    (a pydantic model, a TypedDict, a dataclass, a dict); None otherwise."""
    try:
        hint = typing.get_type_hints(tool.fn).get("return")
    except Exception:
        return None
    if hint is None or hint is Any or hint is type(None):
        return None
    try:
        schema = TypeAdapter(hint).json_schema()
    except Exception:
        return None
    if schema.get("type") != "object":
        return None
    schema.pop("title", None)
    return schema


def description(tool: Tool) -> str:
    """The tool's docstring, with a note on approvals for `confirm` tools."""
    text = inspect.getdoc(tool.fn) or tool.name
    return f"{text}\n\n{_CONFIRM_NOTE}" if tool.confirm else text


def _tools_of(tools: ToolRegistry | Executor | Iterable[Tool]) -> list[Tool]:
    if isinstance(tools, Executor):
        allowed = tools.tools
        names = tools.registry.names()
        return [tools.registry.get(n) for n in names if allowed is None or n in allowed]
    if isinstance(tools, ToolRegistry):
        return [tools.get(n) for n in tools.names()]
    return list(tools)


def tool_definitions(
    tools: ToolRegistry | Executor | Iterable[Tool], format: Format
) -> list[dict[str, Any]]:
    """Each tool as the framework's API lists it (an executor's allow-list applies)."""
    found = _tools_of(tools)
    if format == "openai":
        return [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": description(t),
                    "parameters": arguments_schema(t),
                },
            }
            for t in found
        ]
    if format == "anthropic":
        return [
            {"name": t.name, "description": description(t), "input_schema": arguments_schema(t)}
            for t in found
        ]
    if format == "mcp":
        return [_mcp_tool(t) for t in found]
    raise ValueError(f"unknown format {format!r}: openai, anthropic or mcp")


def _mcp_tool(tool: Tool) -> dict[str, Any]:
    annotations: dict[str, Any] = {"title": tool.name}
    if tool.confirm:
        annotations["destructiveHint"] = True
    if tool.idempotent:
        annotations["idempotentHint"] = True
    entry: dict[str, Any] = {
        "name": tool.name,
        "description": description(tool),
        "inputSchema": arguments_schema(tool),
        "annotations": annotations,
        "_meta": {CONFIRM_META: tool.confirm},
    }
    schema = output_schema(tool)
    if schema is not None:
        entry["outputSchema"] = schema
    return entry


def envelope_from_tool_call(
    item: Mapping[str, Any], *, run_id: str | None = None
) -> dict[str, Any]:
    """The call envelope of a model's tool-call item; its call_id is the item's id.

    Takes an OpenAI Chat Completions tool call (`{"id", "function": {"name", "arguments"}}`),
    an OpenAI Responses `function_call` item (`{"call_id", "name", "arguments"}`) or an
    Anthropic `tool_use` block (`{"id", "name", "input"}`). ToolUsageError for anything else,
    or arguments that are not a JSON object.
    """
    if item.get("type") == "tool_use":
        name, arguments, call_id = item.get("name"), item.get("input"), item.get("id")
    elif item.get("type") == "function_call":
        name, arguments, call_id = item.get("name"), item.get("arguments"), item.get("call_id")
    elif isinstance(item.get("function"), Mapping):
        function = item["function"]
        name, arguments, call_id = function.get("name"), function.get("arguments"), item.get("id")
    else:
        raise ToolUsageError("not a tool call of OpenAI or Anthropic")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            raise ToolUsageError("the tool call's arguments are not JSON") from None
    body: dict[str, Any] = {
        "tool": name,
        "arguments": arguments,
        "run_id": run_id or fresh_id("run_"),
        "call_id": call_id or fresh_id("call_"),
    }
    parse_envelope(body)
    return body


def _content(reply: Reply) -> tuple[str, bool]:
    """The text a model reads for reply, and whether it is an error."""
    if reply.get("status") == "already_done" and isinstance(reply.get("outcome"), dict):
        reply = reply["outcome"]
    status = reply.get("status")
    if status == "ok":
        return json.dumps(reply.get("result"), ensure_ascii=False), False
    if status == "error":
        return json.dumps(reply.get("error"), ensure_ascii=False), True
    if not is_final(reply):
        text = {"status": status, "approval_id": reply.get("approval_id")}
        return json.dumps(text), False
    return json.dumps({"status": status, "outcome": reply.get("outcome")}), True


def tool_result_message(
    reply: Reply, format: Literal["openai", "openai-responses", "anthropic"]
) -> dict[str, Any]:
    """The message that hands reply back to the model, answering the tool call whose id is
    the reply's call_id: an OpenAI `tool` message (or Responses `function_call_output`
    item), or an Anthropic `tool_result` block (put it in a `user` message's content)."""
    text, failed = _content(reply)
    call_id = reply.get("call_id")
    if format == "openai":
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    if format == "openai-responses":
        return {"type": "function_call_output", "call_id": call_id, "output": text}
    if format == "anthropic":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        if failed:
            block["is_error"] = True
        return block
    raise ValueError(f"unknown format {format!r}: openai, openai-responses or anthropic")
