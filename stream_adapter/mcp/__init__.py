"""`stream-adapter mcp`: the topology's tools served to MCP clients, each call over Kafka.

- `server`: the MCP server (tools/list from the registry, tools/call through ToolClient);
- `stdio`: the stdio transport on the event loop.
"""
