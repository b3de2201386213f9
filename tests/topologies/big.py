"""A topology whose tools return results up to the largest a tool may return."""

from __future__ import annotations

import base64
import os

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app

registry = ToolRegistry()


@registry.tool
async def echo(text: str = "") -> str:
    """Return text."""
    return text


def _incompressible(size: int) -> str:
    return base64.b64encode(os.urandom(size)).decode()[:size]


@registry.tool
async def grow(size: int) -> str:
    """A result of size characters (incompressible, so compression does not shrink it)."""
    return _incompressible(size)


@registry.tool(confirm=True)
async def grow_approved(size: int, pad: str = "") -> str:
    """A result of size characters, once a reviewer approves (pad: arguments' bulk)."""
    return _incompressible(size)


app = build_app(Settings(), Executor(registry, MemoryApprovalStore()))
