"""stream-adapter: run AI-agent tool calls from Kafka, with approvals and crash-safe commits.

The names of `__all__` are the library's API (docs/contract.md §14). Each loads from its
module on first use (`_EXPORTS` says where), so `import stream_adapter` stays quick and the
extras' names (the shared stores, `SqsDeadLetters`, `create_app`) stay optional.

The package's folders: `core/` (calls, tools, approvals, replies: no Kafka, no Faust),
`hosts/` (function hosts, queues, the HTTP tool server, shared stores), `stream/` (the Faust
worker; `stream/engine/` alone touches Faust and aiokafka internals), `kafka/` (the project's
Kafka clients), `client/` and `mcp/` (the agent's side), `review/` (the review service),
`ops/` (the operator commands); `settings.py` is the one configuration, `cli.py` and
`commands/` the `stream-adapter` command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stream_adapter.core.approvals import (
        ApprovalRecord,
        ApprovalState,
        ApprovalStore,
        Decision,
        Resolution,
        parse_decision,
    )
    from stream_adapter.core.envelope import (
        MAX_ENVELOPE_BYTES,
        MAX_RECORD_BYTES,
        TOPIC_MAX_MESSAGE_BYTES,
        Envelope,
        parse_envelope,
    )
    from stream_adapter.core.errors import (
        AdapterError,
        ApprovalConflict,
        ApprovalDenied,
        ApprovalExpired,
        ApprovalInProgress,
        ApprovalNotFound,
        AuthenticationFailed,
        BrokerError,
        CodecUnavailable,
        NotAuthorized,
        RecordTooLarge,
        TlsFailed,
        ToolFailed,
        ToolNotFound,
        ToolTimeout,
        ToolUsageError,
        TooManyPending,
        error_reply,
        problem,
    )
    from stream_adapter.core.executor import Executor
    from stream_adapter.core.frameworks import (
        envelope_from_tool_call,
        tool_definitions,
        tool_result_message,
    )
    from stream_adapter.core.logs import configure_logging
    from stream_adapter.core.replies import Reply, is_final, reply_error
    from stream_adapter.core.runners import LoopLocal, LoopRunner, Runner, RunSync, run_sync
    from stream_adapter.core.tools import CallContext, Tool, ToolNames, ToolRegistry, current_call
    from stream_adapter.hosts.backend import Backend, build_backend
    from stream_adapter.hosts.dead_letters import DeadLetter, DeadLetters
    from stream_adapter.hosts.handler import handle_envelope, record_decision, resolve_outcome
    from stream_adapter.hosts.http import create_app
    from stream_adapter.hosts.serverless import tool_handler
    from stream_adapter.hosts.sqs_dead_letters import SqsDeadLetters
    from stream_adapter.hosts.stores import (
        DynamoDBApprovalStore,
        MemoryApprovalStore,
        RedisApprovalStore,
        SQLApprovalStore,
        SQLiteApprovalStore,
    )
    from stream_adapter.settings import Settings
    from stream_adapter.stream.app import build_app

_EXPORTS: dict[str, tuple[str, ...]] = {
    "stream_adapter.core.approvals": (
        "ApprovalRecord",
        "ApprovalState",
        "ApprovalStore",
        "Decision",
        "Resolution",
        "parse_decision",
    ),
    "stream_adapter.core.envelope": (
        "Envelope",
        "MAX_ENVELOPE_BYTES",
        "MAX_RECORD_BYTES",
        "TOPIC_MAX_MESSAGE_BYTES",
        "parse_envelope",
    ),
    "stream_adapter.core.errors": (
        "AdapterError",
        "ApprovalConflict",
        "ApprovalDenied",
        "ApprovalExpired",
        "ApprovalInProgress",
        "ApprovalNotFound",
        "AuthenticationFailed",
        "BrokerError",
        "CodecUnavailable",
        "NotAuthorized",
        "RecordTooLarge",
        "TlsFailed",
        "TooManyPending",
        "ToolFailed",
        "ToolNotFound",
        "ToolTimeout",
        "ToolUsageError",
        "error_reply",
        "problem",
    ),
    "stream_adapter.core.executor": ("Executor",),
    "stream_adapter.core.frameworks": (
        "envelope_from_tool_call",
        "tool_definitions",
        "tool_result_message",
    ),
    "stream_adapter.core.logs": ("configure_logging",),
    "stream_adapter.core.replies": ("Reply", "is_final", "reply_error"),
    "stream_adapter.core.runners": ("LoopLocal", "LoopRunner", "RunSync", "Runner", "run_sync"),
    "stream_adapter.core.tools": (
        "CallContext",
        "Tool",
        "ToolNames",
        "ToolRegistry",
        "current_call",
    ),
    "stream_adapter.hosts.backend": ("Backend", "build_backend"),
    "stream_adapter.hosts.dead_letters": ("DeadLetter", "DeadLetters"),
    "stream_adapter.hosts.handler": ("handle_envelope", "record_decision", "resolve_outcome"),
    "stream_adapter.hosts.http": ("create_app",),
    "stream_adapter.hosts.serverless": ("tool_handler",),
    "stream_adapter.hosts.sqs_dead_letters": ("SqsDeadLetters",),
    "stream_adapter.hosts.stores": (
        "DynamoDBApprovalStore",
        "MemoryApprovalStore",
        "RedisApprovalStore",
        "SQLApprovalStore",
        "SQLiteApprovalStore",
    ),
    "stream_adapter.settings": ("Settings",),
    "stream_adapter.stream.app": ("build_app",),
}
"""Each module of the public API, and the names it gives."""

_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "MAX_ENVELOPE_BYTES",
    "MAX_RECORD_BYTES",
    "TOPIC_MAX_MESSAGE_BYTES",
    "AdapterError",
    "ApprovalConflict",
    "ApprovalDenied",
    "ApprovalExpired",
    "ApprovalInProgress",
    "ApprovalNotFound",
    "ApprovalRecord",
    "ApprovalState",
    "ApprovalStore",
    "AuthenticationFailed",
    "Backend",
    "BrokerError",
    "CallContext",
    "CodecUnavailable",
    "DeadLetter",
    "DeadLetters",
    "Decision",
    "DynamoDBApprovalStore",
    "Envelope",
    "Executor",
    "LoopLocal",
    "LoopRunner",
    "MemoryApprovalStore",
    "NotAuthorized",
    "RecordTooLarge",
    "RedisApprovalStore",
    "Reply",
    "Resolution",
    "RunSync",
    "Runner",
    "SQLApprovalStore",
    "SQLiteApprovalStore",
    "Settings",
    "SqsDeadLetters",
    "TlsFailed",
    "TooManyPending",
    "Tool",
    "ToolFailed",
    "ToolNames",
    "ToolNotFound",
    "ToolRegistry",
    "ToolTimeout",
    "ToolUsageError",
    "build_app",
    "build_backend",
    "configure_logging",
    "create_app",
    "current_call",
    "envelope_from_tool_call",
    "error_reply",
    "handle_envelope",
    "is_final",
    "parse_decision",
    "parse_envelope",
    "problem",
    "record_decision",
    "reply_error",
    "resolve_outcome",
    "run_sync",
    "tool_definitions",
    "tool_handler",
    "tool_result_message",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562), then keep it."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if name == "create_app":
            raise ImportError(
                "create_app needs the 'http' extra: pip install 'stream-adapter[http]'"
            ) from exc
        if name != "SqsDeadLetters":
            raise
        # A stand-in that raises the extra's ImportError when used, as the stores do, so
        # `from stream_adapter import *` works without it.
        from stream_adapter.hosts.stores import _needs_extra

        value = _needs_extra(name, "sqs", exc)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
