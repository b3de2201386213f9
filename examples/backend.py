"""The backend every recipe shares: the demo tools over an approval store chosen by URL.

``STREAM_ADAPTER_APPROVAL_STORE`` names the store: ``redis://host:6379/0#namespace``, a
SQLAlchemy async URL (``postgresql+asyncpg://...``, ``sqlite+aiosqlite:///file.db``),
``dynamodb://TABLE[?region=...&endpoint_url=...]``, or nothing for an in-memory store (one
process only).
"""

from __future__ import annotations

import functools
import os
from urllib.parse import parse_qsl, urldefrag, urlsplit

from stream_adapter import ApprovalStore, Backend, Executor, MemoryApprovalStore, build_backend
from topologies.demo import TOOLS

__all__ = ["STORE_ENV", "TOOLS", "backend", "build_backend", "executor", "store_from_url"]

STORE_ENV = "STREAM_ADAPTER_APPROVAL_STORE"


def store_from_url(url: str) -> ApprovalStore:
    """The approval store a URL names; in memory for an empty one."""
    if not url:
        return MemoryApprovalStore()
    if url.startswith("dynamodb://"):
        from stream_adapter import DynamoDBApprovalStore

        parts = urlsplit(url)
        options = dict(parse_qsl(parts.query))
        return DynamoDBApprovalStore(
            parts.netloc or "stream_adapter_approvals",
            region_name=options.get("region"),
            endpoint_url=options.get("endpoint_url"),
        )
    if url.startswith(("redis://", "rediss://", "unix://")):
        from stream_adapter import RedisApprovalStore

        address, namespace = urldefrag(url)
        return RedisApprovalStore(address, namespace=namespace or "stream-adapter")
    from stream_adapter import SQLApprovalStore

    return SQLApprovalStore(url)


@functools.cache
def backend() -> Backend:
    """Built once per process (per container on a function host), then reused warm."""
    store = store_from_url(os.environ.get(STORE_ENV, ""))
    return build_backend(store=store, topology="topologies.demo")


def executor() -> Executor:
    """The process's executor: ``backend().executor``."""
    return backend().executor
