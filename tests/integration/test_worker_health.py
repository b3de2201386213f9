"""A worker's health signals: quiet while idle (Faust's own stall detector, which reported
healthy idle partitions every 1.25 s, is off), one line and a metric for a partition with work
and no progress, and the tool that holds the event loop named once, with the loop's lag."""

from __future__ import annotations

from pathlib import Path

from tests.harness import Client, WorkerProcess, wait_for

FAUST_DETECTOR = (
    "Stream has not started processing",
    "Stream stopped processing",
    "Has not committed",
    "There are multiple possible explanations",
)
STALLED = "partition stalled"


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


async def test_idle_is_quiet_and_a_real_stall_is_one_line_and_a_metric(
    worker_factory: type[WorkerProcess], client: Client, tmp_path: Path
) -> None:
    worker = worker_factory(  # type: ignore[call-arg]
        STREAM_ADAPTER_TOPOLOGY="tests.topologies.health",
        STREAM_ADAPTER_PARTITION_STALL_S="3",
    )
    await worker.ready()
    calls = client.settings.calls_topic
    parked = await client.call("park", {"n": 1}, key=b"p")  # a table write: the changelog moves
    await client.reply_for(status="pending_approval", call_id=parked.call_id)
    added = await client.call("add", {"a": 1, "b": 2}, key=b"a")
    await client.reply_for(status="ok", call_id=added.call_id)

    release = tmp_path / "release"
    stuck = await client.call("wait_for_file", {"path": str(release)}, key=b"s")
    await wait_for(lambda: STALLED in worker.log_text(), timeout_s=90, what="the stall line")
    await wait_for(
        lambda: sample(worker, "stream_adapter_stalled_partitions", topic=calls) == 1,
        timeout_s=30,
        what="the stalled-partitions gauge",
    )
    await loop_wake_ups(worker, 80)  # 8 s more: Faust's detector would have spoken often
    where = f"topic={calls} partition={stuck.partition} "
    lines = [line for line in worker.log_text().splitlines() if STALLED in line]
    assert len([line for line in lines if where in line]) == 1, lines  # one line, not a stream
    assert sample(worker, "stream_adapter_partition_stalls_total", topic=calls) == 1

    release.touch()
    await client.reply_for(status="ok", call_id=stuck.call_id, timeout_s=60)
    await wait_for(
        lambda: "partition progressing again" in worker.log_text(),
        timeout_s=60,
        what="the partition to progress again",
    )
    assert sample(worker, "stream_adapter_stalled_partitions", topic=calls) == 0
    log = worker.log_text()
    assert not [phrase for phrase in FAUST_DETECTOR if phrase in log], log[-4000:]


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

    def late() -> float:
        bucket = "stream_adapter_event_loop_lag_seconds_bucket"
        return sample(worker, bucket, le="+Inf") - sample(worker, bucket, le="0.25")

    # Two wake-ups more than 0.25 s late, one per hold.
    await wait_for(lambda: late() >= 2, timeout_s=60, what="two late loop wake-ups")
