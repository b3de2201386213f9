"""ToolClient against a real broker and a real exactly-once worker of the demo topology."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from stream_adapter.client import ReplyTimeout, SentCall, SyncToolClient, ToolClient
from stream_adapter.client.tool_client import READ_MAX_WAIT_MS
from stream_adapter.core.errors import ApprovalDenied, ToolFailed, ToolNotFound, ToolUsageError
from stream_adapter.core.ids import derive_ids
from stream_adapter.core.replies import Reply
from stream_adapter.kafka.partitions import partition_for
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from tests.harness import Client, WorkerProcess, make_settings, topic_id, unique, wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 8


@pytest.fixture(scope="module")
def eo_settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    result = make_settings(
        kafka_bootstrap,
        tmp_path_factory.mktemp("client"),
        processing_guarantee="exactly_once",
        partitions=PARTITIONS,
    )
    asyncio.run(create_topics(result))
    return result


@pytest.fixture(scope="module")
def eo_worker(eo_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    worker = WorkerProcess(eo_settings, tmp_path_factory.mktemp("client-work")).start()
    try:
        asyncio.run(worker.ready())
        yield
    finally:
        worker.kill()


@pytest.fixture
async def tools(eo_settings: Settings, eo_worker: None) -> AsyncIterator[ToolClient]:
    async with ToolClient(eo_settings) as client:
        yield client


@pytest.fixture
async def agent(eo_settings: Settings) -> AsyncIterator[Client]:
    """The harness's own client: it decides approvals as the review service would."""
    async with Client(eo_settings) as client:
        yield client


def run_ids_on(partitions: set[int], count: int) -> list[str]:
    """count fresh run ids that Kafka's default partitioner puts on the given partitions."""
    base = unique("run")
    found = (f"{base}-{i}" for i in itertools.count())
    picked = (r for r in found if partition_for(r.encode(), PARTITIONS) in partitions)
    return list(itertools.islice(picked, count))


async def test_a_call_returns_its_final_reply(tools: ToolClient) -> None:
    reply = await tools.call("add", {"a": 2, "b": 3}, timeout_s=60)
    assert reply["status"] == "ok" and reply["result"] == 5
    assert reply["run_id"].startswith("run_") and reply["call_id"].startswith("call_")


async def test_a_call_sent_without_ids_gets_the_workers_derived_ones_and_its_reply(
    tools: ToolClient, eo_settings: Settings
) -> None:
    handle = await tools.send("add", {"a": 20, "b": 22}, derive_ids=True)
    async with handle:
        reply = await handle.result(timeout_s=60)
    assert reply["result"] == 42
    scope = topic_id(eo_settings, eo_settings.calls_topic)
    derived = derive_ids(handle.sent.message_id, eo_settings.source, scope)
    assert (reply["run_id"], reply["call_id"]) == (handle.sent.run_id, handle.sent.call_id)
    assert (handle.sent.run_id, handle.sent.call_id) == derived


async def test_a_started_client_watches_the_broker(eo_settings: Settings) -> None:
    """A started client says how it sees the broker (connectivity.py: one state line per
    change in an outage); one asked not to watch leaves that to another client."""
    async with ToolClient(eo_settings) as watching:
        status = watching.broker
        assert status is not None and status.reachable
        assert status.servers == eo_settings.bootstrap_servers
    assert watching.broker is None  # closed: the watch stopped with it
    async with ToolClient(eo_settings, watch_broker=False) as quiet:
        assert quiet.broker is None


async def test_error_replies_raise_the_contracts_typed_errors(tools: ToolClient) -> None:
    with pytest.raises(ToolFailed) as failed:
        await tools.call("boom", {}, timeout_s=60)
    assert failed.value.retryable is False
    assert failed.value.reply is not None and failed.value.reply["error"]["kind"] == "ToolFailed"
    with pytest.raises(ToolUsageError) as bad:
        await tools.call("add", {"a": "x", "b": 1}, timeout_s=60)
    assert bad.value.status == 422
    with pytest.raises(ToolNotFound):
        await tools.call("admin_reset", {}, timeout_s=60)
    with pytest.raises(ToolUsageError):  # refused before anything is sent
        await tools.call("", {}, timeout_s=60)


async def test_a_thousand_concurrent_calls_over_fifty_runs_read_only_their_partitions(
    tools: ToolClient,
) -> None:
    mine = {1, 6}
    run_ids = run_ids_on(mine, 50)
    calls = [(run_ids[i % 50], i) for i in range(1000)]
    replies = await asyncio.gather(
        *(tools.call("echo", {"n": n}, run_id=run_id, timeout_s=120) for run_id, n in calls)
    )
    assert [(r["run_id"], r["result"]) for r in replies] == [(r, {"n": n}) for r, n in calls]
    assert len({r["call_id"] for r in replies}) == 1000
    assert tools.reader.assigned == frozenset(mine)
    consumer = tools._consumer
    assert consumer is not None and {tp.partition for tp in consumer.assignment()} == mine
    assert consumer._group_id is None  # assigned, never subscribed in a group
    assert tools.reader.assigned != frozenset(range(PARTITIONS))


async def test_the_readers_offset_lookups_do_not_queue_behind_its_fetch(
    tools: ToolClient,
) -> None:
    """The broker answers one request per connection at a time, so an end-offset lookup on
    the reading consumer waited behind its long-poll fetch (some 450 ms of aiokafka's 500)
    before a call to a partition not yet read was sent: lookups have a consumer of their own,
    and the reader's fetch is held at most READ_MAX_WAIT_MS."""
    reader_consumer, lookup = tools._consumer, tools._lookup
    assert lookup is not None and reader_consumer is not None and lookup is not reader_consumer
    assert tools.reader._offsets is lookup and not lookup.assignment()
    assert reader_consumer._fetch_max_wait_ms == READ_MAX_WAIT_MS
    run_id = run_ids_on({3}, 1)[0]  # a partition this client has not read yet, most likely
    reply = await tools.call("echo", {"n": 7}, run_id=run_id, timeout_s=60)
    assert reply["result"] == {"n": 7} and 3 in tools.reader.assigned


async def test_a_confirm_call_waits_for_the_reviewer_and_reports_pending(
    tools: ToolClient, agent: Client
) -> None:
    seen: list[Reply] = []

    async def approve(reply: Reply) -> None:
        seen.append(reply)
        await agent.decide(reply["approval_id"], True)

    args = {"customer": "acme", "amount_cents": 1250}
    reply = await tools.call("send_invoice", args, on_pending=approve, timeout_s=60)
    assert reply["status"] == "ok" and reply["approval_id"] == seen[0]["approval_id"]
    assert [r["status"] for r in seen] == ["pending_approval"]

    async def deny(reply: Reply) -> None:
        await agent.decide(reply["approval_id"], False)

    with pytest.raises(ApprovalDenied) as denied:
        await tools.call("send_invoice", args, on_pending=deny, timeout_s=60)
    assert denied.value.approval_id is not None


async def test_replies_iterate_pending_then_final(tools: ToolClient, agent: Client) -> None:
    statuses = []
    async for reply in tools.replies("send_invoice", {"customer": "c", "amount_cents": 1}):
        statuses.append(reply["status"])
        if reply["status"] == "pending_approval":
            await agent.decide(reply["approval_id"], True)
    assert statuses == ["pending_approval", "ok"]


async def test_a_timeout_leaves_the_call_to_be_followed_later(tools: ToolClient) -> None:
    with pytest.raises(ReplyTimeout) as late:
        await tools.call("sleep", {"seconds": 1.5}, timeout_s=0.2)
    assert isinstance(late.value, TimeoutError) and late.value.retryable
    async with await tools.follow(late.value.sent) as handle:
        reply = await handle.result(timeout_s=60)
    assert reply["result"] == {"slept": 1.5}


async def test_a_restarted_client_finds_the_reply_written_while_it_was_down(
    eo_settings: Settings, eo_worker: None, agent: Client
) -> None:
    sent: list[SentCall] = []
    async with ToolClient(eo_settings) as first:
        handle = await first.send("send_invoice", {"customer": "later", "amount_cents": 9})
        sent.append(handle.sent)
        pending = await anext(aiter(handle))
    assert pending["status"] == "pending_approval"
    stored = sent[0].to_dict()

    await agent.decide(pending["approval_id"], True)
    await agent.reply_for(status="ok", approval_id=pending["approval_id"], timeout_s=60)

    async with ToolClient(eo_settings) as second:
        handle = await second.follow(SentCall(**stored))
        reply = await handle.result(timeout_s=60)
    assert reply["status"] == "ok" and reply["call_id"] == stored["call_id"]
    assert [r["status"] for r in handle.replies] == ["pending_approval", "ok"]


async def test_cancelling_a_call_stops_only_its_wait(tools: ToolClient) -> None:
    task = asyncio.create_task(tools.call("sleep", {"seconds": 0.5}, run_id=unique("run")))

    def watching() -> bool:
        return bool(tools.reader._watches)

    await wait_for(watching, timeout_s=30, what="the call to be watched")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not tools.reader._watches
    assert (await tools.call("add", {"a": 1, "b": 1}, timeout_s=60))["result"] == 2


def test_the_sync_client(eo_settings: Settings, eo_worker: None, tmp_path: Path) -> None:
    pending: list[dict[str, Any]] = []
    with SyncToolClient(eo_settings) as client:
        assert client.call("add", {"a": 40, "b": 2}, timeout_s=60)["result"] == 42
        with pytest.raises(ReplyTimeout) as late:
            client.call(
                "send_invoice",
                {"customer": "s", "amount_cents": 3},
                timeout_s=1,
                on_pending=pending.append,
            )
        assert pending and pending[0]["status"] == "pending_approval"
        assert late.value.sent.tool == "send_invoice"


async def test_an_openai_style_tool_loop_gets_a_tool_message_per_call(tools: ToolClient) -> None:
    from examples.agent_loop import answer_tool_calls

    tool_calls = [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a":1,"b":2}'},
        },
        {"id": "call_b", "type": "function", "function": {"name": "boom", "arguments": "{}"}},
    ]
    messages = await answer_tool_calls(tools, tool_calls, run_id=unique("run"))
    assert messages[0] == {"role": "tool", "tool_call_id": "call_a", "content": "3"}
    assert messages[1]["tool_call_id"] == "call_b"
    assert '"kind": "ToolFailed"' in messages[1]["content"]


async def test_a_missing_replies_topic_is_one_clear_error_before_anything_is_sent(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    from stream_adapter.core.errors import TopicMissing

    settings = make_settings(kafka_bootstrap, tmp_path)  # its topics were never created
    with pytest.raises(TopicMissing, match="replies"):
        await ToolClient(settings).start()


async def test_following_an_earlier_call_reads_back_without_disturbing_calls_in_flight(
    tools: ToolClient,
) -> None:
    """follow seeks its partition back while other calls wait on the same partition: each
    gets its own reply once, and the followed call its final one."""
    run_ids = run_ids_on({3}, 21)
    earlier = await tools.send("echo", {"first": True}, run_id=run_ids[0])
    first = await earlier.result(timeout_s=60)
    earlier.close()
    calls = [
        asyncio.create_task(tools.call("echo", {"n": n}, run_id=run_ids[1 + n % 20], timeout_s=60))
        for n in range(200)
    ]
    followed = []
    for _ in range(5):  # seek back again and again while the calls are in flight
        async with await tools.follow(earlier.sent) as handle:
            followed.append(await handle.result(timeout_s=60))

    async def follow_once() -> Reply:
        async with await tools.follow(earlier.sent) as handle:
            return await handle.result(timeout_s=60)

    # Follows overlapping each other and calls that take new partitions (each a new seek of
    # every partition) while the first follows still read back.
    others = run_ids_on({0, 2, 4, 5, 7}, 5)
    more = [tools.call("echo", {"m": m}, run_id=others[m], timeout_s=60) for m in range(5)]
    together = await asyncio.gather(*(follow_once() for _ in range(5)), *more)
    replies = await asyncio.gather(*calls)
    assert [r["result"] for r in replies] == [{"n": n} for n in range(200)]
    assert followed == [first] * 5 and together[:5] == [first] * 5
    assert [r["result"] for r in together[5:]] == [{"m": m} for m in range(5)]
