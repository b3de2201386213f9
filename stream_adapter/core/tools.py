"""Tools: named sync or async callables whose arguments pydantic validates from type hints.

Arguments are validated in pydantic's strict JSON mode, because they arrive as JSON: an
``int`` parameter takes ``3`` but not ``"3"``, ``3.0``, ``3.5`` or ``true`` (all 422);
a ``float`` takes ``3``; ``datetime``, enums and nested models take their JSON forms.
"""

from __future__ import annotations

import dis
import inspect
import typing
from collections.abc import Callable, Mapping, Set
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar, overload

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from stream_adapter.core.errors import ToolNotFound, ToolUsageError

__all__ = ["CallContext", "Tool", "ToolNames", "ToolRegistry", "allow_list", "current_call"]

F = TypeVar("F", bound=Callable[..., Any])


class CallContext(NamedTuple):
    """Who is running: injected into a tool parameter annotated ``CallContext``.

    Immutable plain data (a NamedTuple: one is built per call, three times faster than a
    frozen dataclass).
    """

    tool: str
    run_id: str
    call_id: str
    approval_id: str | None = None


_current: ContextVar[CallContext] = ContextVar("stream_adapter_call")


def current_call() -> CallContext:
    """The call being run (also inside sync tools); LookupError outside a tool."""
    return _current.get()


def _arguments_model(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], str | None]:
    """Build the pydantic model for fn's parameters once; return it and the context param."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    extra = "forbid"
    for i, param in enumerate(sig.parameters.values()):
        hint = hints.get(param.name, Any)
        if param.kind is param.VAR_KEYWORD:
            extra = "allow"
            continue
        if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
            raise TypeError(f"tool {name!r}: arguments are passed by name; {param} cannot be")
        if hint is CallContext:
            context_param = param.name
            continue
        default = ... if param.default is param.empty else param.default
        # Neutral field names with the real name as alias: no clash with BaseModel attributes.
        fields[f"p{i}"] = (hint, Field(default, alias=param.name))
    config = ConfigDict(extra=extra, strict=True)  # type: ignore[typeddict-item]
    model = create_model(f"{name}_arguments", __config__=config, **fields)
    return model, context_param


@dataclass(frozen=True)
class Tool:
    """A registered tool: its callable, approval need, timeout and retryable exceptions."""

    name: str
    fn: Callable[..., Any]
    confirm: bool = False
    timeout_s: float | None = None
    retry_on: tuple[type[BaseException], ...] = ()
    idempotent: bool = False
    """The tool promises that running it twice with the same call_id has the effect of
    running it once (it keys its side effect on call_id). An approved call of such a tool whose
    run died with its worker runs again instead of answering `outcome: unknown`."""
    is_async: bool = field(init=False)
    args_model: type[BaseModel] = field(init=False, repr=False)
    context_param: str | None = field(init=False, repr=False)
    takes_anything: bool = field(init=False, repr=False)
    never_waits: bool = field(init=False, repr=False)
    """An `async def` without await: its coroutine finishes on its first step, so a worker
    may run it without a task of its own (stream/inline.py)."""

    def __post_init__(self) -> None:
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be positive")
        model, context_param = _arguments_model(self.fn, self.name)
        object.__setattr__(self, "args_model", model)
        object.__setattr__(self, "context_param", context_param)
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))
        takes_anything = not model.model_fields and model.model_config.get("extra") == "allow"
        object.__setattr__(self, "takes_anything", takes_anything)
        object.__setattr__(self, "never_waits", self.is_async and _never_waits(self.fn))

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments for fn, or a 422 ToolUsageError naming the bad fields."""
        if self.takes_anything:
            return dict(arguments)  # only **kwargs: nothing to check beyond the JSON object
        try:
            model = self.args_model.model_validate_json(orjson.dumps(arguments), strict=True)
        except (ValidationError, TypeError, orjson.JSONEncodeError) as exc:
            raise ToolUsageError(_describe(exc), status=422, tool=self.name) from None
        kwargs = {f.alias or n: getattr(model, n) for n, f in type(model).model_fields.items()}
        if model.model_extra:
            kwargs.update(model.model_extra)
        return kwargs


_WAITING_OPS = frozenset({"YIELD_VALUE", "SEND", "GET_AWAITABLE", "GET_ANEXT", "BEFORE_ASYNC_WITH"})


def _never_waits(fn: Callable[..., Any]) -> bool:
    """True when fn's own code cannot suspend: no await, async for or async with in it.

    Conservative: anything that is not a plain function with a code object counts as waiting.
    """
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None or inspect.unwrap(fn) is not fn:
        return False
    return not any(ins.opname in _WAITING_OPS for ins in dis.get_instructions(code))


def _describe(exc: Exception) -> str:
    """Field names and pydantic's messages; never the offending values."""
    if not isinstance(exc, ValidationError):
        return "invalid arguments"
    parts = [
        f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
        for err in exc.errors(include_input=False, include_url=False, include_context=False)[:10]
    ]
    return "invalid arguments: " + "; ".join(parts)


ToolNames = Set[str] | list[str] | tuple[str, ...]
"""An allow-list (``tools=``): a set, list or tuple of tool names. A bare str is not one: it
would be read as its characters (or substrings), so the type excludes it and it is refused."""


def allow_list(tools: ToolNames | None) -> frozenset[str] | None:
    """tools as a frozenset of names (None: no limit); TypeError for a str or a non-name."""
    if tools is None:
        return None
    _refuse_str(tools)
    names = frozenset(tools)
    if any(type(name) is not str for name in names):
        raise TypeError("tools= holds tool names (str) only")
    return names


def _refuse_str(tools: object) -> None:
    """TypeError when tools is a bare str or bytes rather than a collection of names."""
    if isinstance(tools, str | bytes | bytearray):
        raise TypeError(
            "tools= takes a collection of tool names, not one string: write "
            f"tools={{{str(tools)[:64]!r}}} to allow that one tool"
        )


class ToolRegistry:
    """Tools by name; ``@registry.tool`` registers a function under its own name."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, tool: Tool) -> Tool:
        """Add tool; a second tool with the same name is a programming error."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    @overload
    def tool(self, name: F, /) -> F: ...

    @overload
    def tool(
        self,
        name: str | None = None,
        *,
        confirm: bool = False,
        timeout_s: float | None = None,
        retry_on: tuple[type[BaseException], ...] = (),
        idempotent: bool = False,
        timeout: float | None = None,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        name: str | Callable[..., Any] | None = None,
        *,
        confirm: bool = False,
        timeout_s: float | None = None,
        retry_on: tuple[type[BaseException], ...] = (),
        idempotent: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Register a function as a tool, bare (``@tool``) or with options.

        ``timeout`` is accepted as another spelling of ``timeout_s`` (seconds); give one.
        """
        if timeout is not None:
            if timeout_s is not None:
                raise TypeError("pass timeout_s or timeout, not both")
            timeout_s = timeout
        if callable(name):
            fn = name
            self.register(Tool(fn.__name__, fn))
            return fn

        def decorate(fn: F) -> F:
            tool = Tool(name or fn.__name__, fn, confirm, timeout_s, tuple(retry_on), idempotent)
            self.register(tool)
            return fn

        return decorate

    def get(self, name: str) -> Tool:
        """The tool called name; ToolNotFound otherwise."""
        try:
            return self._tools[name]
        except KeyError:
            raise ToolNotFound(f"no tool named {name[:64]!r}", tool=name) from None

    def names(self) -> tuple[str, ...]:
        """Registered tool names, sorted."""
        return tuple(sorted(self._tools))

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)
