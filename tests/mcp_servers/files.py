"""A third-party MCP server (the official SDK's MCPServer) the tests govern through a registry.

Each run of a tool appends a line to the file named by MCP_FILES_RUNS, so tests can count
what ran. Run: ``python -m tests.mcp_servers.files`` (stdio).
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("files")


def _ran(tool: str, **fields: object) -> None:
    with open(os.environ["MCP_FILES_RUNS"], "a") as runs:
        runs.write(json.dumps({"tool": tool, **fields}) + "\n")


@server.tool()
def shout(text: str) -> str:
    """Upper-case text."""
    _ran("shout", text=text)
    return text.upper()


@server.tool()
def delete_file(name: str) -> dict[str, str]:
    """Delete a file (pretend): needs a reviewer where it is governed."""
    _ran("delete_file", name=name)
    return {"deleted": name}


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("secret detail the reply must not carry")


if __name__ == "__main__":
    server.run()
