"""The worker's aiokafka consumer, as the engine creates it from Faust's: committed records
only, and fetches that the broker holds briefly (a table recovery's offset lookups share
their connection)."""

from __future__ import annotations

from pathlib import Path

from stream_adapter.executor import Executor
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app
from stream_adapter.stream.engine.loop_consumer import FETCH_MAX_WAIT_MS
from stream_adapter.tools import ToolRegistry


async def test_reads_committed_records_and_fetches_wait_briefly(tmp_path: Path) -> None:
    registry = ToolRegistry()

    @registry.tool
    async def echo(**kwargs: object) -> dict[str, object]:
        return kwargs

    settings = Settings.for_app("worker-consumer", data_dir=str(tmp_path))
    app = build_app(settings, Executor(registry))
    consumer = app.consumer._thread._create_worker_consumer(app.transport)
    try:
        assert consumer._isolation_level == "read_committed"
        assert consumer._fetch_max_wait_ms == FETCH_MAX_WAIT_MS  # Faust asks for 1,500 ms
    finally:
        await consumer.stop()
