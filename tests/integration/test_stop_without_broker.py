"""A worker whose broker is gone still stops promptly on SIGTERM (an operator's restart must
not hang on a dead cluster); what it had not committed is redelivered, as after a crash."""

from __future__ import annotations

from pathlib import Path

from stream_adapter.stream.topics import create_topics
from stream_adapter_dev.broker import local
from tests.harness import WorkerProcess, make_settings

STOP_S = 20.0
"""Well under the 60 s the stop took before (mode's shutdown timeout), well over the 2 s seen."""


async def test_sigterm_stops_worker_while_broker_is_down(
    own_broker: local.BrokerConfig, tmp_path: Path
) -> None:
    settings = make_settings(local.start(own_broker), tmp_path)
    await create_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "work").start()
    try:
        await worker.ready()
        local.stop(own_broker, kill=True)
        assert worker.terminate(timeout_s=STOP_S) == 0
    finally:
        worker.kill()
