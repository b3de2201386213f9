"""A loopback TCP proxy that can blackhole its traffic: a network partition between one worker
and the broker, with both alive on their sides.

Blackholed, the proxy forwards nothing either way on open connections (not even a close), and
accepts new connections but never connects them onward: each side sees silence, as behind a
dropped route, not a refused or reset connection. Healed, it forwards again what was held back
and connects what was held: as TCP retransmits across a healed partition, a connection whose
ends did not give up meanwhile carries on, and one an end closed (its request timed out) closes.
"""

from __future__ import annotations

import asyncio
import contextlib

CHUNK_BYTES = 1 << 16

__all__ = ["BlackholeProxy"]


class BlackholeProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`upstream_port` until `blackhole`, then holds
    everything until `heal`."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.port = port
        self.upstream_port = upstream_port
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0
        """Client connections accepted so far."""

    @property
    def blackholed(self) -> bool:
        return not self._open.is_set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", self.port)

    def blackhole(self) -> None:
        """Stop forwarding: bytes, closes and new connections are held from now on."""
        self._open.clear()

    def heal(self) -> None:
        """Forward again, held bytes first; held connections are connected onward now."""
        self._open.set()

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            await self._connect(reader, writer)
        finally:
            self._tasks.discard(task)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()  # accepted during a partition: held, never refused
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    "127.0.0.1", self.upstream_port
                )
            except OSError:
                return  # the broker is down: the client sees its connection closed
            pipes = [
                asyncio.create_task(self._pipe(reader, up_writer)),
                asyncio.create_task(self._pipe(up_reader, writer)),
            ]
            try:
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            for end in (writer, up_writer):
                if end is not None:
                    end.close()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """src to dst while open; an end's close is forwarded (as a close) once open too."""
        while True:
            await self._open.wait()
            try:
                data = await src.read(CHUNK_BYTES)
            except OSError:
                data = b""
            await self._open.wait()  # read just as the partition began: held back too
            if not data:
                return
            dst.write(data)
            try:
                await dst.drain()
            except OSError:
                return
