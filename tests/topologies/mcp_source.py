"""A topology whose tools are those of a third-party MCP server (stdio), delete_file confirmed."""

from __future__ import annotations

import os
import sys

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry
from stream_adapter.core.mcp_tools import include_mcp_server
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app

registry = ToolRegistry()
include_mcp_server(
    registry,
    [sys.executable, "-m", "tests.mcp_servers.files"],
    confirm={"delete_file"},
    prefix="files_",
    env=dict(os.environ),  # MCP_FILES_RUNS and PYTHONPATH
)


def build_executor() -> Executor:
    return Executor(registry, MemoryApprovalStore())


app = build_app(Settings(), build_executor())
