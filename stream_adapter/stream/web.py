"""The worker's small HTTP server: `/metrics` (Prometheus text format) and `/health`.

Faust's own web server stays disabled: its default views expose table contents (approval
arguments) and routing internals. This is a plain aiohttp site started and stopped with the
app (`App.add_service`), so it runs for the worker's whole life. A port already in use
(two workers of one host on the same settings) only costs this worker its metrics; it never
stops the worker.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from stream_adapter import logs
from stream_adapter.stream.metrics import Metrics


def metrics_app(metrics: Metrics) -> web.Application:
    """The aiohttp application serving metrics' registry."""

    async def scrape(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/health", health)
    return app


class MetricsServer:
    """Serves metrics on host:port while the app runs; port 0 turns it off."""

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if self._port == 0:
            return
        runner = web.AppRunner(metrics_app(self._metrics), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
        except OSError as exc:
            await runner.cleanup()
            logs.event(logs.WARNING, "metrics server not started", error_kind=type(exc).__name__)
            return
        self._runner = runner
        logs.event(logs.INFO, "metrics server listening", host=self._host, port=self._port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
