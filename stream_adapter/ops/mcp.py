"""`stream-adapter mcp`: serve the topology's tools to MCP clients over stdio or streamable HTTP.

Over stdio, stdout carries the protocol alone: every log line goes to stderr. Over HTTP every
request needs `Authorization: Bearer <token>`, a token of the callers file (the format of the
reviewers file: `stream-adapter reviewers add NAME --reviewers-file callers.json`).
"""

from __future__ import annotations

import asyncio
import getpass
import logging
from typing import Any

import click
import orjson

from stream_adapter.commands import pass_settings
from stream_adapter.settings import Settings

__all__ = ["BearerAuth", "mcp"]

log = logging.getLogger(__name__)

READY = "mcp server listening on"


class BearerAuth:
    """ASGI middleware: 401 without a token of the callers file; the caller's name on the scope."""

    def __init__(self, app: Any, tokens: Any) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from stream_adapter.mcp.server import CALLER_HEADER
        from stream_adapter.review.auth import Unauthenticated

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or ()).get(b"authorization")
        try:
            name = await self.tokens.name_of(header.decode("latin-1") if header else None)
        except Unauthenticated as exc:
            body = orjson.dumps({"title": "Unauthenticated", "status": 401, "detail": exc.detail})
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/problem+json"),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        scope.setdefault("state", {})[CALLER_HEADER] = name
        await self.app(scope, receive, send)


async def _serve(
    settings: Settings,
    transport: str,
    host: str,
    port: int,
    callers_file: str | None,
    caller: str,
    review: str,
    timeout_s: float | None,
) -> None:
    from stream_adapter.cli import load_topology
    from stream_adapter.client import ToolClient
    from stream_adapter.commands.tools import topology_tools
    from stream_adapter.mcp.server import build_server, fixed_caller, request_caller

    tools = topology_tools(load_topology(settings))
    async with ToolClient(settings) as client:
        if transport == "stdio":
            from stream_adapter.mcp.stdio import stdio_streams

            server = build_server(
                tools,
                client,
                caller_of=fixed_caller(caller),
                review_url=review,
                timeout_s=timeout_s,
            )
            log.info("%s stdio (%d tools)", READY, len(tools))
            async with stdio_streams() as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return

        import uvicorn

        from stream_adapter.hosts.http.credentials import BearerTokens

        async def caller_of(ctx: Any) -> str:
            return request_caller(ctx)

        server = build_server(
            tools, client, caller_of=caller_of, review_url=review, timeout_s=timeout_s
        )
        app = BearerAuth(server.streamable_http_app(host=host), BearerTokens(str(callers_file)))
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        web = uvicorn.Server(config)
        serving = asyncio.create_task(web.serve())
        while not web.started and not serving.done():  # noqa: ASYNC110 - uvicorn sets a flag
            await asyncio.sleep(0.05)
        if web.started:
            where = f"[{host}]" if ":" in host else host
            log.warning("%s http://%s:%d/mcp (%d tools)", READY, where, port, len(tools))
        await serving


@click.command("mcp")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio (a desktop agent starts this command) or streamable HTTP.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: address to bind.")
@click.option("--port", type=int, default=8765, show_default=True, help="HTTP: port.")
@click.option(
    "--callers-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="HTTP: the callers' names and hashed tokens (the reviewers file's format). Required.",
)
@click.option(
    "--caller",
    default=None,
    help="stdio: who the calls come from (default: this process's user).",
)
@click.option(
    "--review-url",
    default=None,
    help="The review service's address for progress messages (default: from the settings).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Seconds a call may take, the wait for a reviewer included (default: no limit).",
)
@pass_settings
def mcp(
    settings: Settings,
    transport: str,
    host: str,
    port: int,
    callers_file: str | None,
    caller: str | None,
    review_url: str | None,
    timeout_s: float | None,
) -> None:
    """Serve the topology's tools to MCP clients; each call goes to the worker over Kafka.

    Tools that need approval are marked destructive; while a call waits for a reviewer the
    client gets progress messages naming the approval and its review page. Cancelling a call
    stops its wait, not the call.
    """
    from stream_adapter.core.logs import configure_logging
    from stream_adapter.ops.commands import review_url as default_review_url

    if transport == "http" and not callers_file:
        raise click.UsageError("--transport http needs --callers-file (bearer tokens)")
    configure_logging(settings.log_level, settings.log_format)
    if settings.log_level != "debug":  # aiokafka logs each reply partition taken or let go
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
    review = review_url or default_review_url(settings)
    review = review if review.endswith("/") else review + "/"
    asyncio.run(
        _serve(
            settings,
            transport,
            host,
            port,
            callers_file,
            caller or getpass.getuser(),
            review,
            timeout_s,
        )
    )
