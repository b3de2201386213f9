"""The floor under the MCP layer: a bare JSON-RPC responder in front of ToolClient, no MCP SDK.

What the MCP SDK's client and its transport cost by themselves: this process answers
`initialize`, `tools/list` and `tools/call` with hand-built JSON (orjson), each `tools/call`
going to the worker through ToolClient as `stream-adapter mcp` does, over stdio (asyncio
pipes) or HTTP (a bare ASGI app on uvicorn, plain JSON answers). It implements just enough of
the protocol for the SDK's client to call tools: no progress, no cancellation, no auth. The
client bench times it beside `stream-adapter mcp` (`--mcp stdio-floor,http-floor`): what the
real server adds over it is the server's own share; the floor over `client` is the SDK
client's and the transport's, which no server can take away.

Run by the bench: ``python dev/benchmarks/mcp_floor.py stdio|http [--port N]`` with the
worker's settings in the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from stream_adapter.cli import load_topology
from stream_adapter.client import ToolClient
from stream_adapter.commands.tools import topology_tools
from stream_adapter.core.errors import AdapterError
from stream_adapter.core.frameworks import tool_definitions
from stream_adapter.mcp.server import call_result, error_result
from stream_adapter.settings import Settings

READY = "mcp floor listening"


class Responder:
    """JSON-RPC requests in, JSON-RPC responses out: the three methods the bench uses."""

    def __init__(self, client: ToolClient, definitions: list[dict[str, Any]]) -> None:
        self.client, self.definitions = client, definitions

    async def answer(self, message: dict[str, Any]) -> bytes:
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": params.get("protocolVersion"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "mcp-floor", "version": "0"},
            }
        elif method == "tools/list":
            result = {"tools": self.definitions}
        elif method == "tools/call":
            try:
                reply = await self.client.call(params["name"], params.get("arguments") or {})
                shaped = call_result(reply)
            except AdapterError as exc:
                shaped = error_result(exc)
            result = shaped.model_dump(by_alias=True, mode="json", exclude_none=True)
        else:
            result = {}
        return orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})


async def serve_stdio(responder: Responder) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(0), "rb", 0)
    )
    transport, _ = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
        os.fdopen(os.dup(1), "wb", 0),
    )
    tasks: set[asyncio.Task[None]] = set()

    async def handle(message: dict[str, Any]) -> None:
        transport.write(await responder.answer(message) + b"\n")

    print(READY, file=sys.stderr, flush=True)
    while line := await reader.readline():
        message = orjson.loads(line)
        if "id" in message and "method" in message:
            task = asyncio.create_task(handle(message))
            tasks.add(task)
            task.add_done_callback(tasks.discard)


async def serve_http(responder: Responder, port: int) -> None:
    import uvicorn

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            part = await receive()
            body += part.get("body", b"")
            if not part.get("more_body"):
                break
        message = orjson.loads(body) if scope["method"] == "POST" else {}
        if "id" not in message:  # notifications 202, the event-stream GET and DELETE 405
            status = 202 if scope["method"] == "POST" else 405
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        out = await responder.answer(message)
        headers = [(b"content-type", b"application/json"), (b"mcp-session-id", b"floor")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    web = uvicorn.Server(config)
    serving = asyncio.create_task(web.serve())
    while not web.started and not serving.done():  # noqa: ASYNC110 - uvicorn sets a flag
        await asyncio.sleep(0.05)
    print(READY, file=sys.stderr, flush=True)
    await serving


async def main(args: argparse.Namespace) -> None:
    settings = Settings()
    definitions = tool_definitions(topology_tools(load_topology(settings)), "mcp")
    async with ToolClient(settings) as client:
        responder = Responder(client, definitions)
        if args.transport == "stdio":
            await serve_stdio(responder)
        else:
            await serve_http(responder, args.port)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=8766)
    asyncio.run(main(parser.parse_args()))
