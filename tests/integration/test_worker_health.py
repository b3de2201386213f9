"""A worker's health signals: the tool that holds the event loop named once, with the loop's
lag as a metric."""

from __future__ import annotations

from tests.harness import Client, WorkerProcess, wait_for


def sample(worker: WorkerProcess, name: str, **labels: str) -> float:
    return worker.metrics().get((name, tuple(sorted(labels.items()))), 0.0)


async def loop_wake_ups(worker: WorkerProcess, more: int) -> None:
    """Wait until the loop watch has woken `more` times more (it wakes every 0.1 s): a clock
    read from the worker itself."""
    start = sample(worker, "stream_adapter_event_loop_lag_seconds_count")
    await wait_for(
        lambda: sample(worker, "stream_adapter_event_loop_lag_seconds_count") >= start + more,
        timeout_s=120,
        what=f"{more} loop wake-ups",
    )


async def test_the_tool_holding_the_loop_is_named_once_with_the_lag(
    worker_factory: type[WorkerProcess], client: Client
) -> None:
    worker = worker_factory(  # type: ignore[call-arg]
        STREAM_ADAPTER_TOPOLOGY="tests.topologies.health",
        STREAM_ADAPTER_LOOP_STALL_S="0.3",
    )
    await worker.ready()
    for n in range(2):
        sent = await client.call("hog", {"seconds": 0.8}, key=b"h%d" % n)
        await client.reply_for(status="ok", call_id=sent.call_id, timeout_s=60)
    await loop_wake_ups(worker, 5)
    held = [line for line in worker.log_text().splitlines() if "holding the event loop" in line]
    assert len(held) == 1 and "tool=hog" in held[0], held
    assert sample(worker, "stream_adapter_event_loop_stalls_total", tool="hog") >= 2
    late = sample(worker, "stream_adapter_event_loop_lag_seconds_bucket", le="+Inf") - sample(
        worker, "stream_adapter_event_loop_lag_seconds_bucket", le="0.25"
    )
    assert late >= 2  # two wake-ups at least 0.5 s late
