"""A topology's app stays a Faust app: users' own agents and tables run beside the flows."""

from __future__ import annotations

from collections import Counter

import orjson

from tests.harness import Client, WorkerProcess, read_all, wait_for, wait_lag_zero

CALLS = {"echo": 3, "add": 2, "boom": 1}


async def test_a_users_agent_and_table_count_replies_beside_the_tool_calls(
    worker_factory: type[WorkerProcess], client: Client
) -> None:
    worker = worker_factory(STREAM_ADAPTER_TOPOLOGY="tests.topologies.counting")  # type: ignore[call-arg]
    await worker.ready()
    arguments = {"echo": {"n": 1}, "add": {"a": 1, "b": 2}, "boom": {}}
    for tool, times in CALLS.items():
        for n in range(times):
            await client.call(tool, arguments[tool], key=b"%s-%d" % (tool.encode(), n))
    total = sum(CALLS.values())
    await client.wait_replies(lambda rs: len(rs) >= total, timeout_s=60, what="every reply")
    assert Counter(r["tool"] for r in client.replies) == CALLS
    assert {r["status"] for r in client.replies if r["tool"] == "boom"} == {"error"}

    # The user's table is a Faust table like any other: its changelog holds the counts.
    changelog = f"{worker.settings.app_id}-replies-by-tool-changelog"
    counts: dict[str, int] = {}

    async def counted() -> bool:
        counts.clear()
        for record in await read_all(worker.settings.bootstrap_servers, changelog):
            counts[orjson.loads(record.key)] = orjson.loads(record.value)  # JSON, as Faust writes
        return counts == CALLS

    await wait_for(counted, timeout_s=60, what=f"the counts {CALLS}", interval_s=0.5)
    await wait_lag_zero(worker.settings)  # the flows still commit everything they consumed
    assert worker.terminate() == 0
