"""stream-adapter: run AI-agent tool calls from Kafka, with approvals and crash-safe commits.

The names of `__all__` are the library's API (docs/contract.md §14). `Settings`, `build_app`
(it brings Faust and the Kafka client), the shared stores, `SqsDeadLetters` and `create_app`
load on first use, so `import stream_adapter` stays light.
"""

from typing import TYPE_CHECKING, Any

from stream_adapter.approvals import (
    ApprovalRecord,
    ApprovalState,
    ApprovalStore,
    Decision,
    Resolution,
    parse_decision,
)
from stream_adapter.backend import Backend, build_backend
from stream_adapter.dead_letters import DeadLetter, DeadLetters
from stream_adapter.envelope import (
    MAX_ENVELOPE_BYTES,
    MAX_RECORD_BYTES,
    TOPIC_MAX_MESSAGE_BYTES,
    Envelope,
    parse_envelope,
)
from stream_adapter.errors import (
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
from stream_adapter.executor import Executor
from stream_adapter.frameworks import (
    envelope_from_tool_call,
    tool_definitions,
    tool_result_message,
)
from stream_adapter.handler import handle_envelope, record_decision, resolve_outcome
from stream_adapter.logs import configure_logging
from stream_adapter.replies import Reply, is_final, reply_error
from stream_adapter.runners import LoopLocal, LoopRunner, Runner, RunSync, run_sync
from stream_adapter.serverless import tool_handler
from stream_adapter.stores import MemoryApprovalStore, SQLiteApprovalStore
from stream_adapter.tools import CallContext, Tool, ToolNames, ToolRegistry, current_call

if TYPE_CHECKING:
    from stream_adapter.http import create_app
    from stream_adapter.settings import Settings
    from stream_adapter.sqs_dead_letters import SqsDeadLetters
    from stream_adapter.stores import (
        DynamoDBApprovalStore,
        RedisApprovalStore,
        SQLApprovalStore,
    )
    from stream_adapter.stream.app import build_app

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
    """The shared stores and the HTTP server load on first use, so their extras stay optional;
    the settings and the Kafka topology too, so importing the package stays quick."""
    if name == "Settings":
        from stream_adapter.settings import Settings

        return Settings
    if name == "build_app":
        from stream_adapter.stream.app import build_app

        return build_app
    if name in ("DynamoDBApprovalStore", "RedisApprovalStore", "SQLApprovalStore"):
        from stream_adapter import stores

        return getattr(stores, name)
    if name == "SqsDeadLetters":
        try:
            from stream_adapter.sqs_dead_letters import SqsDeadLetters
        except ModuleNotFoundError as exc:
            # A stand-in that raises the extra's ImportError when used, as the stores do, so
            # `from stream_adapter import *` works without it.
            from stream_adapter.stores import _needs_extra

            stand_in = globals()[name] = _needs_extra(name, "sqs", exc)
            return stand_in
        return SqsDeadLetters
    if name == "create_app":
        try:
            from stream_adapter.http import create_app
        except ModuleNotFoundError as exc:
            raise ImportError(
                "create_app needs the 'http' extra: pip install 'stream-adapter[http]'"
            ) from exc
        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
