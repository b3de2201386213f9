"""Approval stores for hosts without Kafka tables.

| store | shared by | needs |
|---|---|---|
| `MemoryApprovalStore` | one process | nothing |
| `SQLiteApprovalStore` | the processes of one host | nothing |
| `RedisApprovalStore` | every host reaching one Redis | the `redis` extra |
| `SQLApprovalStore` | every host reaching one database (PostgreSQL, SQLite) | the `sql` extra |
| `DynamoDBApprovalStore` | every host reaching one DynamoDB table | the `dynamodb` extra |

The shared stores are imported lazily, so `import stream_adapter` never needs redis-py,
SQLAlchemy or aiobotocore.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stream_adapter.hosts.stores.memory import MemoryApprovalStore
from stream_adapter.hosts.stores.sqlite import SQLiteApprovalStore

if TYPE_CHECKING:
    from stream_adapter.hosts.stores.dynamodb import DynamoDBApprovalStore
    from stream_adapter.hosts.stores.redis import RedisApprovalStore
    from stream_adapter.hosts.stores.sql import SQLApprovalStore

__all__ = [
    "DynamoDBApprovalStore",
    "MemoryApprovalStore",
    "RedisApprovalStore",
    "SQLApprovalStore",
    "SQLiteApprovalStore",
]

_LAZY = {
    "DynamoDBApprovalStore": "dynamodb",
    "RedisApprovalStore": "redis",
    "SQLApprovalStore": "sql",
}
"""Store name → its module here, which is also the name of the extra it needs."""


def __getattr__(name: str) -> Any:
    """Import a shared store on first use.

    Without its extra, the name is a stand-in that raises a clear ImportError when used, so
    ``from stream_adapter import *`` (which touches every name of ``__all__``) still works.
    """
    extra = _LAZY.get(name)
    if extra is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{extra}")
    except ModuleNotFoundError as exc:
        stand_in = _needs_extra(name, extra, exc)
        globals()[name] = stand_in  # one stand-in per name: `is` and isinstance stay sane
        return stand_in
    return getattr(module, name)


def _needs_extra(name: str, extra: str, cause: ModuleNotFoundError) -> type:
    """A class named like the store whose construction raises the missing extra's ImportError."""
    message = f"{name} needs the {extra!r} extra: pip install 'stream-adapter[{extra}]'"

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ImportError(message, name=cause.name) from cause

    return type(name, (), {"__new__": refuse, "__doc__": message, "__module__": __name__})
