"""A chaos run's worker pool never outlives the run: a stop that is cancelled part-way
(the run itself cancelled) still kills every slot it had not stopped."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stream_adapter_dev.broker.local import free_port
from stream_adapter_dev.chaos.harness import WorkerPool
from tests.harness import make_settings


async def test_a_cancelled_stop_still_kills_every_worker(tmp_path: Path) -> None:
    # No broker on that port: the workers keep trying to reach it, alive until stopped.
    settings = make_settings(f"127.0.0.1:{free_port()}", tmp_path)
    pool = WorkerPool(settings, tmp_path / "workers")
    workers = [pool.slot(name) for name in ("w1", "w2")]
    try:
        for worker in workers:
            worker.start()
        assert all(w.alive for w in workers)
        stop = asyncio.ensure_future(pool.stop_all())
        await asyncio.sleep(0)  # the stop has sent w1 SIGTERM and waits for its exit
        assert not stop.done()
        stop.cancel()
        await asyncio.gather(stop, return_exceptions=True)
        assert stop.cancelled()
        assert [w.alive for w in workers] == [False, False]
        assert pool.live() == []
    finally:
        pool.kill_all()
