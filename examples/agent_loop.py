"""An agent's tool loop in the shape of OpenAI's Chat Completions function calling.

The model's side is whatever returns an assistant message with `tool_calls`; here it is left to
the caller (tests script it), so the loop runs without an LLM. Each tool call becomes a call on
Kafka (its id is the call_id), and each final reply the `tool` message the model reads next.
"""

from __future__ import annotations

import asyncio
from typing import Any

from stream_adapter.client import ToolClient
from stream_adapter.core.frameworks import envelope_from_tool_call, tool_result_message
from stream_adapter.core.replies import Reply


async def answer_tool_calls(
    client: ToolClient, tool_calls: list[dict[str, Any]], *, run_id: str
) -> list[dict[str, Any]]:
    """The `tool` messages answering one assistant message's tool calls, run concurrently.

    A call that waits for a reviewer is answered once decided; an error reply is answered as
    the problem object (the model sees why), never raised.
    """

    async def one(item: dict[str, Any]) -> dict[str, Any]:
        body = envelope_from_tool_call(item, run_id=run_id)
        final: Reply = {}
        async with await client.send(
            body["tool"], body["arguments"], run_id=body["run_id"], call_id=body["call_id"]
        ) as handle:
            async for reply in handle:
                final = reply
        return tool_result_message(final, "openai")

    return list(await asyncio.gather(*(one(item) for item in tool_calls)))
