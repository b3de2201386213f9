"""The consumer shares the worker's event loop (stream/engine/loop_consumer.py): calls that
hold the CPU must not starve its heartbeats, or the group would drop the worker and rebalance."""

from __future__ import annotations

from tests.harness import Client, WorkerProcess, wait_for


async def test_calls_that_never_await_do_not_cost_the_worker_its_group_membership(
    worker_factory: type[WorkerProcess], client: Client
) -> None:
    # Produced before the worker starts, the 40 calls of 250 ms come in one fetch: 10 s of
    # CPU, beyond the 6 s session timeout, if the round ran them all without yielding.
    for n in range(40):
        await client.send({"tool": "spin", "arguments": {"ms": 250}}, key=b"%d" % n)
    worker = worker_factory(  # type: ignore[call-arg]
        STREAM_ADAPTER_TOPOLOGY="tests.topologies.busy",
        STREAM_ADAPTER_SESSION_TIMEOUT_S="6",
        STREAM_ADAPTER_LOG_LEVEL="info",
    )
    await worker.ready()
    await client.wait_replies(lambda rs: len(rs) >= 40, timeout_s=90, what="40 spin replies")
    assert {reply["status"] for reply in client.replies} == {"ok"}
    log = worker.log_text()
    assert "session expired" not in log and "Heartbeat failed" not in log, log[-4000:]
    assert log.count("Revoking previously assigned partitions") == 1, log[-4000:]


async def test_a_tool_holding_the_loop_past_the_session_timeout_is_an_error_naming_it(
    worker_factory: type[WorkerProcess], client: Client
) -> None:
    """Heartbeats run on the loop: past the session timeout the group drops the worker, and
    the call runs again. The worker says so at ERROR, with the tool, and counts it."""
    worker = worker_factory(  # type: ignore[call-arg]
        STREAM_ADAPTER_TOPOLOGY="tests.topologies.health",
        STREAM_ADAPTER_SESSION_TIMEOUT_S="6",
    )
    await worker.ready()
    await client.call("hog", {"seconds": 8}, key=b"h")
    line = "tool held the event loop past the session timeout"
    await wait_for(lambda: line in worker.log_text(), timeout_s=90, what="the ERROR line")
    [said] = [entry for entry in worker.log_text().splitlines() if line in entry][:1]
    assert "ERROR" in said and "tool=hog" in said, said
    metric = ("stream_adapter_event_loop_session_losses_total", (("tool", "hog"),))
    await wait_for(lambda: worker.metrics().get(metric, 0) >= 1, timeout_s=60, what="the metric")
