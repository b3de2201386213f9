"""The in-place retry loop, including going on from a first attempt made elsewhere."""

from __future__ import annotations

from stream_adapter.core.errors import ToolFailed
from stream_adapter.core.retries import RetryPolicy, attempt

FAST = RetryPolicy(attempts=3, base_s=0.0)


async def test_a_retryable_failure_is_tried_again_until_it_succeeds() -> None:
    calls: list[int] = []

    async def work() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ToolFailed("not yet", retryable=True)
        return "done"

    outcome = await attempt(work, FAST)
    assert (outcome.value, outcome.error, outcome.attempts) == ("done", None, 3)


async def test_going_on_from_a_failed_first_attempt_counts_it() -> None:
    calls: list[int] = []
    retried: list[int] = []

    async def work() -> str:
        calls.append(1)
        raise ToolFailed("still failing", retryable=True)

    first = ToolFailed("first", retryable=True)
    outcome = await attempt(work, FAST, failed=first, on_retry=lambda e, n: retried.append(n))
    assert len(calls) == 2, "the first of three attempts was the one made elsewhere"
    assert outcome.attempts == 3 and outcome.error is not None
    assert retried == [1, 2]


async def test_a_first_failure_that_is_not_retryable_ends_at_once() -> None:
    async def work() -> str:
        raise AssertionError("must not run")

    first = ToolFailed("final", retryable=False)
    outcome = await attempt(work, FAST, failed=first)
    assert outcome.error is first and outcome.attempts == 1
