"""contract §8 and §9 end to end: per-key order, keys never wait on each other, commits and lag."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.harness import Client, WorkerProcess, dead_letters, group_lag, unique, wait_for


async def test_slow_key_does_not_delay_other_keys_and_keeps_its_order(
    worker: WorkerProcess, client: Client
) -> None:
    # Same partition on purpose: only the per-key scheduling keeps B from waiting on A.
    # Key A's calls share a run_id, so their replies share a reply partition, whose order is
    # the order they were written (replies on different partitions may arrive in any order).
    run_a = unique("run")
    started = time.monotonic()
    a_calls = [unique("call") for _ in range(4)]
    await client.send(
        {"tool": "sleep", "arguments": {"seconds": 1.5}, "run_id": run_a, "call_id": a_calls[0]},
        key=b"A",
        partition=0,
    )
    for n, call_id in enumerate(a_calls[1:]):
        await client.send(
            {"tool": "echo", "arguments": {"n": n}, "run_id": run_a, "call_id": call_id},
            key=b"A",
            partition=0,
        )
    p, o = await client.send({"tool": "echo", "arguments": {"b": 1}}, key=b"B", partition=0)
    other = client.sent(p, o)

    await client.reply_for(run_id=other.run_id)
    b_latency_s = time.monotonic() - started
    await client.wait_replies(
        lambda rs: len(client.replies_for(run_id=run_a)) >= len(a_calls),
        timeout_s=30,
        what="key A's replies",
    )
    order = [r["run_id"] for r in client.replies]
    assert order.index(other.run_id) < order.index(run_a), "B waited for A's sleep"
    assert [r["call_id"] for r in client.replies_for(run_id=run_a)] == a_calls, (
        "key A ran out of order"
    )
    print(f"key B answered {b_latency_s * 1000:.0f} ms after key A's 1.5 s sleep was sent")


async def test_poison_message_between_valid_ones(worker: WorkerProcess, client: Client) -> None:
    settings = worker.settings
    first = client.sent(
        *await client.send({"tool": "echo", "arguments": {"i": 1}}, key=b"P", partition=1)
    )
    poison = client.sent(*await client.send(b'{"tool": "echo", "argu', key=b"P", partition=1))
    last = client.sent(
        *await client.send({"tool": "echo", "arguments": {"i": 2}}, key=b"P", partition=1)
    )
    for sent in (first, last):
        assert (await client.reply_for(run_id=sent.run_id))["status"] == "ok"
    error = await client.reply_for(run_id=poison.run_id)
    assert error["status"] == "error" and error["error"]["kind"] == "ToolUsageError"
    letters = await dead_letters(settings)
    assert [m.value for m in letters] == [b'{"tool": "echo", "argu']

    async def lag_is_zero() -> bool:
        return (
            await group_lag(settings.bootstrap_servers, settings.app_id, settings.calls_topic) == 0
        )

    await wait_for(lag_is_zero, timeout_s=30, what="consumer lag 0", interval_s=0.2)


async def test_retrying_call_holds_back_only_its_own_key(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    # Backoff of 0.5 s, 1 s: key R waits about 1.5 s in retries; key S must not.
    worker = worker_factory(STREAM_ADAPTER_RETRY_BACKOFF_S="0.5")
    await worker.ready()
    # R's two calls share a run_id, hence a reply partition, whose order is the write order.
    run_r, calls_r = unique("run"), [unique("call"), unique("call")]
    flaky = {"tool": "flaky", "arguments": {"key": unique("r"), "fail_times": 2}}
    await client.send({**flaky, "run_id": run_r, "call_id": calls_r[0]}, key=b"R", partition=2)
    behind = {"tool": "echo", "arguments": {}, "run_id": run_r, "call_id": calls_r[1]}
    await client.send(behind, key=b"R", partition=2)
    other = client.sent(
        *await client.send({"tool": "echo", "arguments": {}}, key=b"S", partition=2)
    )
    await client.wait_replies(
        lambda rs: (
            len(client.replies_for(run_id=run_r)) >= 2
            and bool(client.replies_for(run_id=other.run_id))
        ),
        what="three replies",
    )
    order = [r["run_id"] for r in client.replies]
    assert order.index(other.run_id) < order.index(run_r), "S waited for R's retries"
    replies_r = client.replies_for(run_id=run_r)
    assert [r["call_id"] for r in replies_r] == calls_r, "R ran out of order"
    assert replies_r[0]["result"] == {"attempts": 3}


async def test_max_in_flight_limits_running_tools(
    worker_factory: Callable[..., WorkerProcess], client: Client
) -> None:
    # Four 0.6 s sleeps on four keys with room for two: at least two rounds of 0.6 s.
    worker = worker_factory(STREAM_ADAPTER_MAX_IN_FLIGHT="2")
    await worker.ready()
    started = time.monotonic()
    sent = [
        client.sent(
            *await client.send(
                {"tool": "sleep", "arguments": {"seconds": 0.6}}, key=b"m%d" % i, partition=i % 4
            )
        )
        for i in range(4)
    ]
    await client.wait_replies(
        lambda rs: all(client.replies_for(run_id=s.run_id) for s in sent), what="four sleep replies"
    )
    elapsed_s = time.monotonic() - started
    assert elapsed_s >= 1.2, f"four 0.6 s tools with max_in_flight=2 took only {elapsed_s:.2f} s"
