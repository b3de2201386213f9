"""The time an invocation may still use, and the rule for approved runs within it.

A function host gives each invocation a budget (SPEC §15); what is not done by then is failed
and delivered again. An approved call runs at most once (SPEC §7), so cutting one mid-run
loses it for good. Hence: an approved run starts only when the time left can hold its tool's
``timeout_s`` (otherwise it is left for the redelivery), and once started the budget waits for
it. Without a budget (the worker, a plain ``handle_envelope``) nothing here applies.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar

from stream_adapter.core import logs
from stream_adapter.core.errors import ToolTimeout

__all__ = ["Budget", "check", "reserve", "time_budget"]


class Budget:
    """A deadline on the running loop that approved runs may hold off while they run."""

    def __init__(self, scope: asyncio.Timeout, deadline: float) -> None:
        self._scope = scope
        self.deadline = deadline
        self._holds = 0

    def left_s(self) -> float:
        """Seconds until the deadline (negative once past)."""
        return self.deadline - asyncio.get_running_loop().time()

    def hold(self) -> None:
        """An approved run starts: the deadline cuts nothing until every such run is done."""
        self._holds += 1
        self._scope.reschedule(None)

    def release(self) -> None:
        """An approved run ended: the deadline applies again (at once, if it has passed)."""
        self._holds -= 1
        if self._holds == 0:
            self._scope.reschedule(self.deadline)


_current: ContextVar[Budget | None] = ContextVar("stream_adapter_budget", default=None)


@asynccontextmanager
async def time_budget(seconds: float) -> AsyncIterator[Budget]:
    """Run the body within seconds (TimeoutError past them); approved runs inside see it."""
    async with asyncio.timeout(seconds) as scope:
        deadline = scope.when()
        assert deadline is not None
        budget = Budget(scope, deadline)
        token = _current.set(budget)
        try:
            yield budget
        finally:
            _current.reset(token)


def check() -> None:
    """TimeoutError when the current budget is spent: start no new message past it.

    Needed because a tool that never suspends would otherwise finish before the deadline's
    cancellation reaches it (an approved run may have held the deadline off).
    """
    budget = _current.get()
    if budget is not None and budget.left_s() <= 0:
        raise TimeoutError


@contextmanager
def reserve(need_s: float | None, *, tool: str, approval_id: str) -> Iterator[None]:
    """Admit an approved run, or raise a retryable ToolTimeout so it is delivered again.

    need_s is the tool's timeout; a tool without one needs only some time left. Admitted, the
    run (claim, tool, finish) is not cut by the budget. Without a budget: always admitted.
    """
    budget = _current.get()
    if budget is None:
        yield
        return
    left_s = budget.left_s()
    if left_s <= 0 or (need_s is not None and left_s < need_s):
        logs.event(
            logs.WARNING,
            "approved call left for redelivery: too little time to run it",
            tool=tool,
            approval_id=approval_id,
            error_kind=ToolTimeout.kind,
        )
        raise ToolTimeout(
            "too little time left in this invocation to run the approved call; it runs when "
            "delivered again",
            tool=tool,
            approval_id=approval_id,
        )
    budget.hold()
    try:
        yield
    finally:
        budget.release()
