"""Tool definitions for agent frameworks, their tool calls as envelopes, replies as results."""

from __future__ import annotations

import json

import pytest

from stream_adapter.core.errors import ApprovalDenied, ToolFailed, ToolUsageError
from stream_adapter.core.frameworks import (
    CONFIRM_META,
    envelope_from_tool_call,
    tool_definitions,
    tool_result_message,
)
from stream_adapter.core.replies import (
    already_done_reply,
    error_reply_body,
    is_final,
    ok_reply,
    pending_reply,
    reply_error,
)
from tests.cli_support import run
from topologies.demo import build_executor

DEMO = {"echo", "add", "sleep", "flaky", "boom", "send_invoice", "wire_funds"}


def test_each_framework_lists_the_allowed_tools_with_their_schemas() -> None:
    executor = build_executor()
    openai = {d["function"]["name"]: d for d in tool_definitions(executor, "openai")}
    anthropic = {d["name"]: d for d in tool_definitions(executor, "anthropic")}
    mcp = {d["name"]: d for d in tool_definitions(executor, "mcp")}
    assert set(openai) == set(anthropic) == set(mcp) == DEMO  # admin_reset left out
    add_schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    assert openai["add"]["type"] == "function"
    assert openai["add"]["function"]["parameters"] == add_schema
    assert anthropic["add"]["input_schema"] == add_schema
    assert mcp["add"]["inputSchema"] == add_schema
    assert anthropic["add"]["description"] == "a + b; non-integers are a 422."


def test_mcp_annotations_say_which_tools_need_a_reviewer_and_which_are_idempotent() -> None:
    mcp = {d["name"]: d for d in tool_definitions(build_executor(), "mcp")}
    invoice, wire, add = mcp["send_invoice"], mcp["wire_funds"], mcp["add"]
    assert invoice["annotations"]["destructiveHint"] is True
    assert invoice["annotations"]["idempotentHint"] is True
    assert wire["annotations"]["destructiveHint"] is True
    assert "idempotentHint" not in wire["annotations"]
    assert "destructiveHint" not in add["annotations"]
    assert invoice["_meta"][CONFIRM_META] is True and add["_meta"][CONFIRM_META] is False
    assert "approves" in invoice["description"]
    assert mcp["echo"]["outputSchema"]["type"] == "object"  # returns dict[str, Any]
    assert "outputSchema" not in add  # an int is not an object


@pytest.mark.parametrize(
    "item",
    [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a":1}'}},
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a":1}'},
        {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 1}},
    ],
)
def test_a_tool_call_item_becomes_an_envelope_keeping_its_id(item: dict[str, object]) -> None:
    body = envelope_from_tool_call(item, run_id="run-7")
    assert body == {"tool": "add", "arguments": {"a": 1}, "run_id": "run-7", "call_id": "call_1"}


@pytest.mark.parametrize(
    "item",
    [
        {"type": "text", "text": "hi"},
        {"id": "c", "function": {"name": "add", "arguments": "not json"}},
        {"type": "tool_use", "id": "c", "name": "add", "input": [1]},
        {"type": "tool_use", "id": "c", "name": "", "input": {}},
    ],
)
def test_anything_else_is_a_usage_error(item: dict[str, object]) -> None:
    with pytest.raises(ToolUsageError):
        envelope_from_tool_call(item)


def test_replies_become_result_messages() -> None:
    ok = ok_reply("add", "r", "call_1", 3)
    assert tool_result_message(ok, "openai") == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "3",
    }
    assert tool_result_message(ok, "openai-responses")["output"] == "3"
    assert tool_result_message(ok, "anthropic") == {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": "3",
    }
    denied = error_reply_body(ApprovalDenied("no"), tool="add", run_id="r", call_id="call_1")
    block = tool_result_message(denied, "anthropic")
    assert block["is_error"] is True and json.loads(block["content"])["kind"] == "ApprovalDenied"
    pending = tool_result_message(pending_reply("add", "r", "call_1", "ap_1"), "openai")
    assert json.loads(pending["content"])["approval_id"] == "ap_1"


@pytest.mark.parametrize("framework", ["openai", "anthropic", "mcp"])
def test_the_tools_command_prints_a_frameworks_definitions(framework: str) -> None:
    ran = run("tools", "--format", framework)
    assert ran.code == 0, ran.err
    assert json.loads(ran.out) == tool_definitions(build_executor(), framework)  # type: ignore[arg-type]


def test_error_replies_read_back_as_their_typed_errors() -> None:
    denied = error_reply_body(
        ApprovalDenied("no"), tool="t", run_id="r", call_id="c", approval_id="ap"
    )
    exc = reply_error(denied)
    assert isinstance(exc, ApprovalDenied) and exc.approval_id == "ap" and exc.reply == denied
    assert exc.status == 403 and exc.retryable is False and exc.detail == "no"
    done = already_done_reply("t", "r", "c", "ap", denied)
    assert isinstance(reply_error(done), ApprovalDenied)
    assert reply_error(ok_reply("t", "r", "c", 1)) is None
    assert reply_error(already_done_reply("t", "r", "c", "ap", "unknown")) is None
    odd = {**denied, "error": {"kind": "SomethingNew", "status": 418, "retryable": True}}
    unknown = reply_error(odd)
    assert type(unknown) is ToolFailed and unknown.status == 418 and unknown.retryable
    assert not is_final(pending_reply("t", "r", "c", "ap")) and is_final(denied)
