"""The core: calls, tools, approvals and replies, with no Kafka and no Faust.

- `envelope`, `ids`: what a call is and the ids that name it again on redelivery;
- `tools`, `executor`, `tool_threads`, `live_runs`, `runners`: tools and how they run;
- `approvals`, `signing`, `pending`, `record_limits`, `retention`: the approval state machine,
  signed decisions and the limits on records;
- `replies`, `errors`: what a call answers, and the one error hierarchy;
- `budget`, `retries`: time and retry rules; `frameworks`, `mcp_tools`: agent frameworks' tool
  formats and other MCP servers' tools; `logs`, `_json`: logging and strict JSON.
"""
