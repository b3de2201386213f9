"""The executor: resolves a tool against the allow-lists and runs it with its limits."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from stream_adapter.core import logs
from stream_adapter.core._json import MAX_DEPTH, SHALLOW_BYTES, JSONError, check_value
from stream_adapter.core.errors import AdapterError, ToolFailed, ToolNotFound, ToolTimeout
from stream_adapter.core.live_runs import LiveRuns
from stream_adapter.core.tool_threads import ToolThreads
from stream_adapter.core.tools import (
    CallContext,
    Tool,
    ToolNames,
    ToolRegistry,
    _current,
    _refuse_str,
    allow_list,
)

if TYPE_CHECKING:
    from stream_adapter.core.approvals import ApprovalStore

__all__ = ["MAX_RESULT_BYTES", "Executor"]

MAX_RESULT_BYTES = 1 << 20
"""Largest encoded result a tool may return."""


class Executor:
    """Runs tools from a registry; `store` holds approvals for hosts without Kafka tables.

    `tools` is an allow-list applied to every call; `origin` names who owns the records
    this executor parks. Sync tools run on a private thread pool of `max_threads`; a tool
    with `max_stuck_threads` runs still going past its timeout (default: a quarter of the
    pool) is refused new ones until one returns (tool_threads.py).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        store: ApprovalStore | None = None,
        *,
        origin: str = "queue",
        tools: ToolNames | None = None,
        max_threads: int = 32,
        max_stuck_threads: int | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.origin = origin
        self.tools = allow_list(tools)
        self.threads = ToolThreads(max_threads, max_stuck_threads)
        self.live_runs = LiveRuns()
        """Approved runs in progress here: a resume of one waits for it (handler.py)."""

    def resolve(self, name: str, tools: ToolNames | None = None) -> Tool:
        """The tool called name if every allow-list admits it; ToolNotFound reads the same.

        A str for tools is a TypeError: ``name in "delete_all_logs"`` would admit substrings.
        """
        if type(tools) is not frozenset and tools is not None:
            _refuse_str(tools)
        allowed = (self.tools is None or name in self.tools) and (tools is None or name in tools)
        if allowed and name in self.registry:
            return self.registry.get(name)
        raise ToolNotFound(f"no tool named {name[:64]!r}", tool=name)

    def validate(self, tool: Tool, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments for tool, or a 422 ToolUsageError."""
        return tool.validate(arguments)

    async def run_tool(
        self,
        tool: Tool,
        arguments: Mapping[str, Any],
        *,
        run_id: str,
        call_id: str,
        approval_id: str | None = None,
        gate: Callable[[], None] | None = None,
    ) -> Any:
        """Validate, run within the tool's timeout, and return a JSON-safe result.

        Raises ToolUsageError (422), ToolTimeout, ToolFailed or the tool's own AdapterError.
        gate: called right before the tool's own code starts (in its thread for a sync tool);
        what it raises propagates unchanged and the tool does not run.
        """
        kwargs = tool.validate(arguments)
        ctx = _new_context(CallContext, (tool.name, run_id, call_id, approval_id))
        if tool.context_param is not None:
            kwargs[tool.context_param] = ctx
        token = _current.set(ctx)
        try:
            if gate is not None and tool.is_async:
                _pass(gate)  # nothing awaited between it and the tool's first line
            if tool.timeout_s is None and tool.is_async:
                result = await tool.fn(**kwargs)  # no timeout to arm: skip its machinery
            else:
                async with asyncio.timeout(tool.timeout_s):
                    if tool.is_async:
                        result = await tool.fn(**kwargs)
                    else:
                        result = await self._in_thread(tool, kwargs, gate)
        except _GateClosed as closed:
            raise closed.reason from None
        except BaseException as exc:
            error = _call_error(exc, tool, run_id, call_id, approval_id)
            if error is exc:
                raise
            raise error from None
        finally:
            _current.reset(token)
        _check_result(result, tool, run_id, call_id, approval_id)
        return result

    def run_now(
        self, tool: Tool, arguments: Mapping[str, Any], *, run_id: str, call_id: str
    ) -> Any:
        """run_tool for a tool that never waits (`Tool.never_waits`), on the caller's own
        stack: its coroutine is stepped once, with no coroutine, task or timeout around it.

        Returns WAITED (the coroutine closed, nothing run to its end) if the tool suspended
        after all; raises what run_tool raises.
        """
        ran = self.run_now_encoded(tool, arguments, run_id=run_id, call_id=call_id)
        return ran if ran is WAITED else ran[0]

    def run_now_encoded(
        self, tool: Tool, arguments: Mapping[str, Any], *, run_id: str, call_id: str
    ) -> tuple[Any, bytes]:
        """run_now, with the result's JSON as the result check encoded it: a reply can take
        it as it is (`orjson.Fragment`) instead of encoding the result again. WAITED as
        run_now."""
        ctx = _new_context(CallContext, (tool.name, run_id, call_id, None))
        kwargs: Mapping[str, Any] = arguments  # unpacking into fn copies it anyway
        if tool.context_param is not None or not tool.takes_anything:
            checked = tool.validate(arguments)
            if tool.context_param is not None:
                checked[tool.context_param] = ctx
            kwargs = checked
        token = _current.set(ctx)
        try:
            step = tool.fn(**kwargs)
            try:
                step.send(None)
            except StopIteration as done:
                result = done.value
            else:
                step.close()
                waited: tuple[Any, bytes] = WAITED
                return waited
        except BaseException as exc:
            error = _call_error(exc, tool, run_id, call_id, None)
            if error is exc:
                raise
            raise error from None
        finally:
            _current.reset(token)
        return result, _check_result(result, tool, run_id, call_id, None)

    async def _in_thread(
        self, tool: Tool, kwargs: dict[str, Any], gate: Callable[[], None] | None = None
    ) -> Any:
        """Run a sync tool on the pool; past the timeout its result is discarded."""
        fn = tool.fn if gate is None else functools.partial(_gated, gate, tool.fn)
        call = functools.partial(contextvars.copy_context().run, fn, **kwargs)
        ctx = _current.get(None)
        ids = {"run_id": ctx.run_id, "call_id": ctx.call_id} if ctx is not None else {}
        return await self.threads.run(tool.name, call, **ids)

    def close(self) -> None:
        """Release the thread pool without waiting for tools stuck past their timeout."""
        self.threads.close()


class _GateClosed(Exception):
    """A run's gate refused to let its tool start (carries what the gate raised)."""

    def __init__(self, reason: BaseException) -> None:
        super().__init__(str(reason))
        self.reason = reason


def _pass(gate: Callable[[], None]) -> None:
    """Call gate; what it raises comes out as _GateClosed (never taken for the tool's)."""
    try:
        gate()
    except Exception as exc:
        raise _GateClosed(exc) from None


def _gated(gate: Callable[[], None], fn: Callable[..., Any], **kwargs: Any) -> Any:
    """fn(**kwargs) once gate() lets it start, in the thread that runs it."""
    _pass(gate)
    return fn(**kwargs)


def _cancelled(exc: BaseException) -> bool:
    """True when exc is the cancellation of the running task, not one the tool raised."""
    if not isinstance(exc, asyncio.CancelledError):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: nothing here can be cancelling us
        return False
    return task is not None and task.cancelling() > 0


def _ids(tool: Tool, run_id: str, call_id: str, approval_id: str | None) -> dict[str, Any]:
    return {"tool": tool.name, "run_id": run_id, "call_id": call_id, "approval_id": approval_id}


WAITED: Any = object()
"""What `Executor.run_now` returns for a tool that suspended: nothing of it ran to its end."""


def _call_error(
    exc: BaseException, tool: Tool, run_id: str, call_id: str, approval_id: str | None
) -> BaseException:
    """What a tool's exception becomes for its caller: exc itself (an AdapterError, given the
    call's ids, or the cancellation of the caller), ToolTimeout or ToolFailed (logged)."""
    if isinstance(exc, TimeoutError):
        ids = _ids(tool, run_id, call_id, approval_id)
        logs.event(logs.WARNING, "tool timed out", error_kind=ToolTimeout.kind, **ids)
        return ToolTimeout(f"tool {tool.name!r} ran past its {tool.timeout_s} s timeout", **ids)
    if isinstance(exc, AdapterError):
        exc.tool, exc.run_id, exc.call_id = tool.name, run_id, call_id
        exc.approval_id = approval_id
        return exc
    if isinstance(exc, Exception):
        retryable = isinstance(exc, tool.retry_on)
    elif _cancelled(exc):
        return exc  # the caller is being cancelled (a shutdown): let it stop
    else:
        # SystemExit, KeyboardInterrupt or CancelledError raised by the tool itself: a
        # failed call, never the end of the loop (or of the worker) that runs it.
        retryable = False
    ids = _ids(tool, run_id, call_id, approval_id)
    logs.event(logs.WARNING, "tool raised", error_kind=ToolFailed.kind, **ids)
    logs.event(logs.DEBUG, "tool exception", exc_type=type(exc).__name__, **ids)
    failed = ToolFailed(
        f"tool {tool.name!r} raised {type(exc).__name__}", retryable=retryable, **ids
    )
    failed.original = exc  # kept off the traceback chain so no log prints its text
    return failed


def _check_result(
    result: Any, tool: Tool, run_id: str, call_id: str, approval_id: str | None
) -> bytes:
    """result's JSON; ToolFailed (logged) unless result can be a reply's result."""
    checked = _result_json(result)
    if isinstance(checked, str):
        ids = _ids(tool, run_id, call_id, approval_id)
        logs.event(logs.WARNING, "tool result refused", error_kind=ToolFailed.kind, **ids)
        raise ToolFailed(f"tool {tool.name!r} returned {checked}", **ids)
    return checked


_new_context: Callable[[type[CallContext], tuple[str, str, str, str | None]], CallContext]
_new_context = tuple.__new__
"""Builds a CallContext from its four fields in order, by tuple's own constructor: one is
built per call, and the NamedTuple's generated Python one costs about twice as much."""

_STRICT = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _result_json(result: Any) -> bytes | str:
    """result encoded as JSON, or why it cannot be a reply's result (a str): it must be JSON
    (within MAX_DEPTH) that round-trips unchanged, or pass the exact walk, and encode to
    MAX_RESULT_BYTES at most.

    The round trip is the fast test, and it gives the size: orjson refuses dataclasses,
    datetimes, sets, bytes, huge integers and non-string keys, and anything it converts
    (NaN to null, a UUID or a plain enum to a string) comes back unequal. Subclasses of int
    and str (IntEnum, StrEnum) come back equal: they are accepted as what they encode to.
    Only a value failing the test (a tuple, say) is walked, which also says what is wrong.
    """
    try:
        encoded: bytes | None = orjson.dumps(result, option=_STRICT)
    except orjson.JSONEncodeError:
        encoded = None
    if (
        encoded is None
        or (len(encoded) > SHALLOW_BYTES and encoded.count(b"[") + encoded.count(b"{") > MAX_DEPTH)
        or orjson.loads(encoded) != result
    ):
        try:
            check_value(result)
        except JSONError as exc:
            return f"a non-JSON-safe result: {exc}"
        if encoded is None:
            encoded = orjson.dumps(result)
    if len(encoded) > MAX_RESULT_BYTES:
        return f"more than {MAX_RESULT_BYTES} bytes"
    return encoded
