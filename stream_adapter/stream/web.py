"""The worker's small HTTP server: `/metrics` (Prometheus text format) and `/health`.

Faust's own web server stays disabled: its default views expose table contents (approval
arguments) and routing internals. This is a plain aiohttp site started and stopped with the
app (`App.add_service`), so it runs for the worker's whole life. A port already in use
(two workers of one host on the same settings) only costs this worker its metrics; it never
stops the worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from stream_adapter.core import logs
from stream_adapter.kafka.connectivity import BrokerStatus
from stream_adapter.stream.engine import StuckPartition
from stream_adapter.stream.metrics import Metrics


def metrics_app(
    metrics: Metrics,
    stuck: Callable[[], Iterable[StuckPartition]] = tuple,
    broker: Callable[[], BrokerStatus | None] = lambda: None,
) -> web.Application:
    """The aiohttp application serving metrics' registry, and health with stuck()'s
    partitions and broker()'s reachability."""

    async def scrape(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(_: web.Request) -> web.Response:
        return web.Response(text=health_text(list(stuck()), broker()))

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/health", health)
    return app


def health_text(stuck: list[StuckPartition], broker: BrokerStatus | None = None) -> str:
    """`ok`, or `degraded` and a line per trouble: the broker unreachable, a stuck partition.
    Either way the status is 200: the worker serves its other partitions and reconnects by
    itself, and a restart would not move past the batch nor bring the broker back."""
    down = broker is not None and not broker.reachable
    if not stuck and not down:
        return "ok\n"
    lines = []
    if broker is not None and not broker.reachable:
        since = datetime.fromtimestamp(broker.since or 0, UTC).isoformat(timespec="seconds")
        lines.append(
            f"degraded: broker unreachable since {since} ({round(broker.outage_s)} s, "
            f"{broker.error_kind}), retrying {broker.servers}"
        )
    if stuck:
        lines.append(f"degraded: {len(stuck)} partition(s) stuck, the others are served")
    for part in stuck:
        since = datetime.fromtimestamp(part.since, UTC).isoformat(timespec="seconds")
        lines.append(
            f"stuck {part.topic} partition {part.partition} at offset {part.offset}: "
            f"{part.error_kind} since {since}"
        )
    return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves metrics on host:port while the app runs; port 0 turns it off."""

    def __init__(
        self,
        metrics: Metrics,
        host: str,
        port: int,
        stuck: Callable[[], Iterable[StuckPartition]] = tuple,
        broker: Callable[[], BrokerStatus | None] = lambda: None,
    ) -> None:
        self._stuck = stuck
        self._broker = broker
        self._metrics = metrics
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if self._port == 0:
            return
        runner = web.AppRunner(
            metrics_app(self._metrics, self._stuck, self._broker), access_log=None
        )
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
