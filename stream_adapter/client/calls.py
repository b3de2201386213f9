"""A produced call and the handle that follows its replies to the final one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from stream_adapter.core.errors import AdapterError
from stream_adapter.core.replies import Reply, is_final, reply_error

if TYPE_CHECKING:
    from stream_adapter.client.reader import ReplyReader, Watch

__all__ = ["CallHandle", "OnReply", "ReplyTimeout", "SentCall"]

OnReply = Callable[[Reply], Awaitable[None] | None]
"""A callback given each reply (a `pending_approval` one, then the final one)."""


@dataclass(frozen=True, slots=True)
class SentCall:
    """What identifies a produced call: keep it to pick the call up again after a restart.

    `sent_at_ms` is the producer's clock (epoch milliseconds) just before the call was sent;
    `ToolClient.follow` reads the replies partition from a little before it.
    """

    tool: str
    run_id: str
    call_id: str
    message_id: str
    sent_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for storing; `SentCall(**d)` reads it back."""
        return asdict(self)


class ReplyTimeout(AdapterError, TimeoutError):
    """No final reply within the caller's `timeout_s`. The call may still finish: follow
    `sent` again (`ToolClient.follow`) to get its reply later."""

    title = "No reply in time"
    status = 504
    retryable = True

    def __init__(self, detail: str, *, sent: SentCall) -> None:
        super().__init__(detail, tool=sent.tool, run_id=sent.run_id, call_id=sent.call_id)
        self.sent = sent


class CallHandle:
    """The replies of one call: iterate them, or await the final one with `result()`.

    Closing it (or leaving its `async with`) stops following; the call itself goes on.
    """

    def __init__(self, sent: SentCall, reader: ReplyReader, watch: Watch) -> None:
        self.sent = sent
        self._reader = reader
        self._watch = watch
        self.replies: list[Reply] = []
        """Every reply seen so far, in order."""

    @property
    def final(self) -> Reply | None:
        """The final reply once it has been read."""
        return self.replies[-1] if self.replies and is_final(self.replies[-1]) else None

    async def __aenter__(self) -> CallHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop following the call's replies."""
        self._reader.unwatch(self._watch)

    def __aiter__(self) -> AsyncIterator[Reply]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Reply]:
        """Each reply as it arrives, ending after the final one (errors included, not raised)."""
        if self.final is not None:
            return
        while True:
            reply = await self._watch.next()
            self.replies.append(reply)
            yield reply
            if is_final(reply):
                return

    async def result(
        self,
        *,
        timeout_s: float | None = None,
        on_pending: OnReply | None = None,
        on_reply: OnReply | None = None,
    ) -> Reply:
        """The final reply; the typed error (contract §6) of an `error` reply is raised.

        An `already_done` reply whose outcome is an error raises that error too; one whose
        outcome is `ok` or "unknown" is returned as it is. ReplyTimeout past timeout_s.
        """
        try:
            async with asyncio.timeout(timeout_s):
                final = self.final
                if final is None:
                    async for reply in self:
                        if on_reply is not None:
                            await _called(on_reply, reply)
                        if not is_final(reply) and on_pending is not None:
                            await _called(on_pending, reply)
                        final = reply
        except TimeoutError:
            raise ReplyTimeout(
                f"no final reply within {timeout_s} s (follow the call to read it later)",
                sent=self.sent,
            ) from None
        assert final is not None
        error = reply_error(final)
        if error is not None:
            raise error
        return final


async def _called(callback: OnReply, reply: Reply) -> None:
    outcome = callback(reply)
    if outcome is not None:
        await outcome
