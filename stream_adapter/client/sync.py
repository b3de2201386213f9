"""`SyncToolClient`: the ToolClient for code without an event loop (scripts, threads).

Its ToolClient lives on a loop of its own in a background thread (a `LoopRunner`); every
method runs there and blocks the caller until it is done. Safe to share between threads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from stream_adapter.client.calls import SentCall
from stream_adapter.client.tool_client import ToolClient
from stream_adapter.core.replies import Reply
from stream_adapter.core.runners import LoopRunner
from stream_adapter.settings import Settings

__all__ = ["SyncToolClient"]


class SyncToolClient:
    """`with SyncToolClient() as client: client.call("add", {"a": 1, "b": 2})`."""

    def __init__(self, settings: Settings | None = None, **options: Any) -> None:
        self._runner = LoopRunner("stream-adapter-client")
        self._client = ToolClient(settings, **options)

    @property
    def client(self) -> ToolClient:
        """The async client underneath (use it only on the client's own loop)."""
        return self._client

    def start(self) -> SyncToolClient:
        """Connect (ToolClient.start)."""
        self._runner.run(self._client.start)
        return self

    def close(self) -> None:
        """Disconnect and stop the background loop."""
        try:
            self._runner.run(self._client.close)
        finally:
            self._runner.close()

    def __enter__(self) -> SyncToolClient:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        timeout_s: float | None = None,
        on_pending: Callable[[Reply], None] | None = None,
        on_sent: Callable[[SentCall], None] | None = None,
        **ids: Any,
    ) -> Reply:
        """ToolClient.call; callbacks run on the client's thread, so keep them short."""

        async def work() -> Reply:
            return await self._client.call(
                tool, arguments, timeout_s=timeout_s, on_pending=on_pending, on_sent=on_sent, **ids
            )

        return self._runner.run(work)

    def wait(
        self,
        sent: SentCall,
        *,
        timeout_s: float | None = None,
        since_ms: int | None = None,
        on_pending: Callable[[Reply], None] | None = None,
    ) -> Reply:
        """The final reply of a call sent earlier (ToolClient.follow, then its result)."""

        async def work() -> Reply:
            async with await self._client.follow(sent, since_ms=since_ms) as handle:
                return await handle.result(timeout_s=timeout_s, on_pending=on_pending)

        return self._runner.run(work)
