"""The chaos run's partition proxy against real sockets: it forwards both ways, holds every
byte, close and new connection while blackholed (the ends see silence, no reset), and delivers
what it held once healed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from stream_adapter_dev.broker.local import free_port
from stream_adapter_dev.chaos.proxy import BlackholeProxy

SILENCE_S = 0.5
"""How long an end listens for bytes that must not come (a wait for nothing: a bound, not a
timing under test)."""


class Upstream:
    """An echo server that upper-cases what it gets; connections it accepted are counted."""

    def __init__(self) -> None:
        self.port = free_port()
        self.accepted = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.writers.append(writer)
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Upstream, BlackholeProxy]]:
    upstream = Upstream()
    await upstream.start()
    proxy = BlackholeProxy(free_port(), upstream.port)
    await proxy.start()
    yield upstream, proxy
    await proxy.stop()
    assert upstream.server is not None
    upstream.server.close()


async def _connect(proxy: BlackholeProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def _silent(reader: asyncio.StreamReader) -> bool:
    """True when nothing (no byte, no close) arrives within SILENCE_S."""
    try:
        await asyncio.wait_for(reader.read(1), SILENCE_S)
    except TimeoutError:
        return True
    return False


async def test_forwards_both_ways(pair: tuple[Upstream, BlackholeProxy]) -> None:
    _, proxy = pair
    reader, writer = await _connect(proxy)
    writer.write(b"hello")
    assert await asyncio.wait_for(reader.readexactly(5), 10) == b"HELLO"
    writer.close()


async def test_blackhole_holds_bytes_and_heal_delivers_them(
    pair: tuple[Upstream, BlackholeProxy],
) -> None:
    _, proxy = pair
    reader, writer = await _connect(proxy)
    writer.write(b"a")
    assert await asyncio.wait_for(reader.readexactly(1), 10) == b"A"
    proxy.blackhole()
    writer.write(b"held")
    await writer.drain()  # the client's write succeeds: the bytes are held, not refused
    assert await _silent(reader)
    proxy.heal()
    assert await asyncio.wait_for(reader.readexactly(4), 10) == b"HELD"
    writer.close()


async def test_new_connection_during_blackhole_is_held_not_refused(
    pair: tuple[Upstream, BlackholeProxy],
) -> None:
    upstream, proxy = pair
    proxy.blackhole()
    reader, writer = await _connect(proxy)  # accepted
    writer.write(b"late")
    assert await _silent(reader)
    assert upstream.accepted == 0  # never connected onward while cut off
    proxy.heal()
    assert await asyncio.wait_for(reader.readexactly(4), 10) == b"LATE"
    assert upstream.accepted == 1
    writer.close()


async def test_close_is_held_during_blackhole(pair: tuple[Upstream, BlackholeProxy]) -> None:
    upstream, proxy = pair
    reader, writer = await _connect(proxy)
    writer.write(b"x")
    assert await asyncio.wait_for(reader.readexactly(1), 10) == b"X"
    proxy.blackhole()
    # The upstream closes its end: the client hears nothing of it.
    for end in upstream.writers:
        end.close()
    assert await _silent(reader)
    proxy.heal()
    assert await asyncio.wait_for(reader.read(1), 10) == b""  # the close, now
    writer.close()
