"""What a reviewer is told about a tool: its description and its arguments' names, types and units.

The review service reads the topology's tools once at start, as `stream-adapter tools` finds
them (its `build_executor()`, `executor`, or `registry` and `TOOLS`), and keeps plain data from
them: the docstring, the JSON schema pydantic builds from the type hints, and a unit per argument
(declared in the schema as `unit`, or read from the name's suffix, as in `amount_cents` or
`timeout_s`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stream_adapter.core import logs
from stream_adapter.core.tools import Tool
from stream_adapter.settings import Settings

__all__ = ["ArgumentInfo", "Catalog", "ToolInfo", "describe_tool", "load_catalog", "unit_of"]

# Suffix (or whole name) -> the unit it names. Longest match first.
_UNITS: tuple[tuple[str, str], ...] = (
    ("_seconds", "seconds"),
    ("_minutes", "minutes"),
    ("_hours", "hours"),
    ("_days", "days"),
    ("_cents", "cents"),
    ("_bytes", "bytes"),
    ("_percent", "percent"),
    ("_pct", "percent"),
    ("_ms", "milliseconds"),
    ("_us", "microseconds"),
    ("_ns", "nanoseconds"),
    ("_s", "seconds"),
)


def unit_of(name: str, schema: Mapping[str, Any] | None = None) -> str | None:
    """The unit of an argument: declared in its schema (`unit`), else named by its suffix."""
    declared = (schema or {}).get("unit")
    if isinstance(declared, str) and declared:
        return declared
    lowered = name.lower()
    for suffix, unit in _UNITS:
        if lowered.endswith(suffix) or lowered == suffix[1:]:
            return unit
    return None


@dataclass(frozen=True, slots=True)
class ArgumentInfo:
    """One parameter of a tool as its schema has it."""

    name: str
    type: str
    required: bool
    unit: str | None = None
    description: str | None = None
    default: Any = None
    has_default: bool = False


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool as a reviewer sees it."""

    name: str
    summary: str
    description: str
    arguments: tuple[ArgumentInfo, ...]
    any_keys: bool
    """True when the tool takes keyword arguments it does not name (`**kwargs`)."""
    confirm: bool
    idempotent: bool
    timeout_s: float | None
    retry_on: tuple[str, ...]
    schema: dict[str, Any] = field(repr=False)

    def argument(self, name: str) -> ArgumentInfo | None:
        return next((a for a in self.arguments if a.name == name), None)


@dataclass(frozen=True, slots=True)
class Catalog:
    """The topology's tools by name, or why they could not be read."""

    tools: Mapping[str, ToolInfo]
    error: str | None = None

    def get(self, name: str) -> ToolInfo | None:
        return self.tools.get(name)


def _type_label(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """A short human label for a JSON schema: `integer`, `list of string`, `string or null`."""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1], {})
        if "enum" in target:
            return "one of " + ", ".join(str(v) for v in target["enum"])
        return str(target.get("title", ref.rsplit("/", 1)[-1]))
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    if "const" in schema:
        return f"exactly {schema['const']}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type_label(s, defs) for s in schema[key])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"list of {_type_label(items, defs)}" if isinstance(items, dict) else "list"
    if kind == "object":
        return "object"
    label = str(kind) if kind else "any"
    fmt = schema.get("format")
    return f"{label} ({fmt})" if fmt else label


def _docstring(tool: Tool) -> str:
    return inspect.cleandoc(inspect.getdoc(tool.fn) or "")


def describe_tool(tool: Tool) -> ToolInfo:
    """Plain data about tool, from its docstring and its arguments' JSON schema."""
    schema = tool.args_model.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    arguments = []
    for name, prop in schema.get("properties", {}).items():
        arguments.append(
            ArgumentInfo(
                name=name,
                type=_type_label(prop, defs),
                required=name in required,
                unit=unit_of(name, prop),
                description=prop.get("description"),
                default=prop.get("default"),
                has_default="default" in prop,
            )
        )
    description = _docstring(tool)
    return ToolInfo(
        name=tool.name,
        summary=description.split("\n\n", 1)[0].replace("\n", " "),
        description=description,
        arguments=tuple(arguments),
        any_keys=schema.get("additionalProperties") is not False,
        confirm=tool.confirm,
        idempotent=tool.idempotent,
        timeout_s=tool.timeout_s,
        retry_on=tuple(e.__name__ for e in tool.retry_on),
        schema=schema,
    )


def catalog_of(tools: Iterable[Tool]) -> Catalog:
    """The catalog of tools, by name."""
    return Catalog({tool.name: describe_tool(tool) for tool in tools})


def load_catalog(settings: Settings) -> Catalog:
    """The configured topology's tools, found as `stream-adapter tools` finds them; an empty
    catalog with the reason when the topology cannot be read.

    The topology module reads its settings from the environment (as the worker's does), so the
    service's settings are passed on first.
    """
    from stream_adapter.commands.tools import topology_tools

    settings.export()  # secrets stay out of os.environ, where tools would inherit them
    try:
        return catalog_of(topology_tools(importlib.import_module(settings.topology)))
    except Exception as exc:  # a broken topology must not stop reviewers from deciding
        kind = type(exc).__name__
    logs.event(logs.WARNING, "review: tool descriptions unavailable", error_kind=kind)
    reason = f"the tools of topology {settings.topology!r} could not be read ({kind})"
    return Catalog({}, error=reason)
