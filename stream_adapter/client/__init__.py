"""The agent's side: call tools over Kafka and wait for their replies.

`ToolClient` (async) and `SyncToolClient` share one producer and one reply reader among all
calls in flight; docs/agents.md shows them, the MCP server and the framework helpers.
"""

from stream_adapter.client.calls import CallHandle, ReplyTimeout, SentCall
from stream_adapter.client.reader import ReplyReader
from stream_adapter.client.sync import SyncToolClient
from stream_adapter.client.tool_client import FOLLOW_SLACK_MS, ToolClient

__all__ = [
    "FOLLOW_SLACK_MS",
    "CallHandle",
    "ReplyReader",
    "ReplyTimeout",
    "SentCall",
    "SyncToolClient",
    "ToolClient",
]
