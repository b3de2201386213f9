"""MCP over this process's stdin and stdout on asyncio pipes: the event loop waits on them.

The MCP SDK's stdio transport reads each line and writes each message through a worker
thread (three thread hand-offs a call, each waiting for the GIL while the loop is busy);
asyncio's pipe transports need none. As the SDK does, fds 0 and 1 are diverted while
serving (0 to the null device, 1 to stderr), so stray output of a tool or a library never
lands in the protocol, and both are restored after. Stdin or stdout that is a regular file
(which the event loop cannot wait on) is served by the SDK's transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp.types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

__all__ = ["stdio_streams"]

MAX_LINE = 64 * 1024 * 1024
"""Longest JSON-RPC line read (a tool's arguments can be large; the SDK sets no limit)."""


def _waitable(fd: int) -> bool:
    """Whether the event loop can wait on fd: a pipe, a socket or a terminal."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


@contextlib.asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) streams `Server.run` takes, over stdin and stdout."""
    if not (_waitable(0) and _waitable(1)):
        async with stdio_server() as streams:
            yield streams
        return
    saved = {fd: (os.dup(fd), os.get_blocking(fd)) for fd in (0, 1)}
    loop = asyncio.get_running_loop()
    wire_in, wire_out = os.fdopen(os.dup(0), "rb", 0), os.fdopen(os.dup(1), "wb", 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=MAX_LINE, loop=loop)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), wire_in
    )
    write_transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop),
        wire_out,
    )
    writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
    incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_lines() -> None:
        async with incoming_send:
            while line := await reader.readline():
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:  # the server answers a parse error; keep reading
                    await incoming_send.send(exc)
                    continue
                await incoming_send.send(SessionMessage(message))

    async def write_messages() -> None:
        async with outgoing_receive:
            async for sent in outgoing_receive:
                data = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                writer.write(data.encode() + b"\n")
                await writer.drain()

    tasks = [asyncio.create_task(read_lines()), asyncio.create_task(write_messages())]
    try:
        yield incoming, outgoing
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        read_transport.close()
        write_transport.close()
        for fd, (copy, blocking) in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
            os.set_blocking(fd, blocking)
