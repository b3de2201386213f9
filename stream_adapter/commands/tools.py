"""`stream-adapter tools`: what each tool of a topology takes and how the worker runs it.

A topology module names its tools in one of three ways, looked for in this order:
`build_executor()` (as the demo topology does), an `executor`, or a `registry` with an
optional `TOOLS` allow-list.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection
from types import ModuleType
from typing import Any

from stream_adapter.core.errors import ConfigError
from stream_adapter.core.executor import Executor
from stream_adapter.core.frameworks import arguments_schema
from stream_adapter.core.tools import Tool, ToolRegistry, allow_list
from stream_adapter.settings import Settings


def topology_tools(module: ModuleType) -> list[Tool]:
    """The tools a topology's worker serves (its allow-list applied), by name."""
    registry: ToolRegistry | None = None
    allowed: Collection[str] | None = None
    build = getattr(module, "build_executor", None)
    executor = build() if callable(build) else getattr(module, "executor", None)
    if isinstance(executor, Executor):
        registry, allowed = executor.registry, executor.tools
    elif isinstance(getattr(module, "registry", None), ToolRegistry):
        registry = module.registry
        try:
            allowed = allow_list(getattr(module, "TOOLS", None))
        except TypeError as exc:  # a bare str would be read as its substrings
            raise ConfigError(f"topology {module.__name__!r}: TOOLS: {exc}") from None
    if registry is None:
        raise ConfigError(
            f"topology {module.__name__!r} names no tools: give it build_executor(), "
            "an `executor` or a `registry`"
        )
    names = [n for n in registry.names() if allowed is None or n in allowed]
    return [registry.get(name) for name in names]


def arguments_summary(schema: dict[str, Any]) -> str:
    """`name: type` per argument (`name?` when optional), for a table cell."""
    if "properties" not in schema:
        return "any"
    required = set(schema.get("required", ()))
    parts = []
    for name, prop in schema["properties"].items():
        kind = prop.get("type") or "|".join(
            str(option.get("type", "?")) for option in prop.get("anyOf", ())
        )
        parts.append(f"{name}{'' if name in required else '?'}: {kind or 'object'}")
    return ", ".join(parts) or "none"


def describe_tools(module: ModuleType, settings: Settings) -> list[dict[str, Any]]:
    """One row per tool: typed values (the table shows some, --json all)."""
    rows = []
    for tool in topology_tools(module):
        schema = arguments_schema(tool)
        retry_on = [exc.__name__ for exc in tool.retry_on]
        retryable = [*retry_on, "ToolTimeout"] if tool.timeout_s is not None else retry_on
        retry = (
            f"{settings.retry_attempts} attempts on {', '.join(retryable)}"
            if retryable and settings.retry_attempts > 1
            else "none"
        )
        rows.append(
            {
                "tool": tool.name,
                "description": inspect.getdoc(tool.fn) or "",
                "confirm": tool.confirm,
                "idempotent": tool.idempotent,
                "timeout_s": tool.timeout_s,
                "retry": retry,
                "retry_on": retryable,
                "retry_attempts": settings.retry_attempts,
                "retry_backoff_s": settings.retry_backoff_s,
                "arguments": arguments_summary(schema),
                "arguments_schema": schema,
            }
        )
    return rows
