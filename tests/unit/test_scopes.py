"""Scopes: each input topic's id, looked up once per partition assignment (stream/scopes.py)."""

from __future__ import annotations

import asyncio

import pytest

from stream_adapter.core.errors import BrokerError
from stream_adapter.stream.scopes import Scopes


async def test_a_topic_id_is_looked_up_once_per_assignment() -> None:
    asked: list[str] = []
    ids = iter(["id-1", "id-2"])
    generation = [1]

    async def lookup(topic: str) -> str:
        asked.append(topic)
        await asyncio.sleep(0)
        return next(ids)

    scopes = Scopes(lookup, lambda: generation[0])
    assert scopes.current("calls") is None
    assert await asyncio.gather(*(scopes.get("calls") for _ in range(5))) == ["id-1"] * 5
    assert scopes.current("calls") == "id-1" and asked == ["calls"]
    generation[0] = 2  # a new assignment: the topic may have been created again
    assert scopes.current("calls") is None
    assert await scopes.get("calls") == "id-2" and asked == ["calls", "calls"]


async def test_a_failed_lookup_is_a_retryable_broker_error() -> None:
    async def missing(topic: str) -> str:
        raise LookupError(f"topic {topic} not found")

    async def down(topic: str) -> str:
        raise ConnectionError("refused")

    for lookup in (missing, down):
        with pytest.raises(BrokerError) as caught:
            await Scopes(lookup, lambda: 0).get("calls")
        assert caught.value.retryable


async def test_prime_makes_the_scope_current_before_any_record_and_never_raises() -> None:
    """The worker primes the calls topic's scope at each assignment: until it is current the
    inline lane hands every call to the scheduled path (a fifth of its speed exactly once)."""

    async def lookup(topic: str) -> str:
        return "id-1"

    async def down(topic: str) -> str:
        raise ConnectionError("refused")

    scopes = Scopes(lookup, lambda: 1)
    await scopes.prime("calls")
    assert scopes.current("calls") == "id-1"
    unreachable = Scopes(down, lambda: 1)
    await unreachable.prime("calls")  # logged; `get` tries again for the first record
    assert unreachable.current("calls") is None
