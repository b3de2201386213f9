"""Retry policy for retryable failures: exponential backoff with full jitter (contract §10)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from stream_adapter.core.errors import AdapterError

__all__ = ["Attempted", "RetryPolicy", "attempt"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a retryable call is tried again in place."""

    attempts: int = 3
    base_s: float = 0.2
    factor: float = 2.0
    cap_s: float = 5.0

    def delay_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based), jittered.

        Full jitter (uniform in [0, backoff]) keeps retries of many calls from aligning.
        """
        backoff = min(self.cap_s, self.base_s * self.factor ** (attempt - 1))
        return (rng or random).uniform(0.0, backoff)


@dataclass(frozen=True, slots=True)
class Attempted(Generic[T]):
    """What came of trying work under a policy: a value or the last error, and how many tries."""

    value: T | None
    error: AdapterError | None
    attempts: int


async def attempt(
    work: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[AdapterError, int], None] | None = None,
    failed: AdapterError | None = None,
) -> Attempted[T]:
    """Run work, retrying retryable AdapterErrors in place; other exceptions propagate.

    failed: the error of a first attempt already made elsewhere; this goes on from there.
    """
    tries = 1
    while True:
        if failed is None:
            try:
                return Attempted(await work(), None, tries)
            except AdapterError as exc:
                failed = exc
        if not failed.retryable or tries >= policy.attempts:
            return Attempted(None, failed, tries)
        if on_retry is not None:
            on_retry(failed, tries)
        await asyncio.sleep(policy.delay_s(tries))
        tries += 1
        failed = None
