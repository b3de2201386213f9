"""The worker's aiokafka consumer, as the engine creates it from Faust's: committed records
only, and fetches that the broker holds briefly (a table recovery's offset lookups share
their connection)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stream_adapter.core.executor import Executor
from stream_adapter.core.tools import ToolRegistry
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app
from stream_adapter.stream.engine.loop_consumer import FETCH_MAX_WAIT_MS


def _app(app_id: str, tmp_path: Path) -> tuple[Settings, Any]:
    registry = ToolRegistry()

    @registry.tool
    async def echo(**kwargs: object) -> dict[str, object]:
        return kwargs

    settings = Settings.for_app(app_id, data_dir=str(tmp_path))
    return settings, build_app(settings, Executor(registry))


async def test_reads_committed_records_and_fetches_wait_briefly(tmp_path: Path) -> None:
    _, app = _app("worker-consumer", tmp_path)
    consumer = app.consumer._thread._create_worker_consumer(app.transport)
    try:
        assert consumer._isolation_level == "read_committed"
        assert consumer._fetch_max_wait_ms == FETCH_MAX_WAIT_MS  # Faust asks for 1,500 ms
    finally:
        await consumer.stop()


async def test_ack_all_counts_each_new_offset_once_across_runs_of_partitions(
    tmp_path: Path,
) -> None:
    from faust.types import TP
    from faust.types.tuples import Message

    settings, app = _app("worker-acks", tmp_path)
    consumer = app.consumer
    topic = settings.calls_topic
    zero, one = TP(topic, 0), TP(topic, 1)
    consumer._committed_offset[one] = 5  # offsets below it are committed already
    app.topics._acking_topics.add(topic)  # as the conductor indexes it when the worker starts

    def message(tp: TP, offset: int) -> Message:
        return Message(topic, tp.partition, offset, 0.0, 0, [], b"k", b"{}", None, tp=tp)

    first = [message(zero, 1), message(zero, 2), message(one, 4), message(one, 6)]
    first.append(message(TP(topic, 0), 3))  # an equal partition object of its own
    consumer.ack_all(first)
    consumer.ack_all([first[0], message(zero, 2), message(one, 7)])  # one acked, one new twice
    assert list(consumer._acked[zero]) == [1, 2, 3]
    assert list(consumer._acked[one]) == [6, 7]
    assert consumer._acked_index[one] == {6, 7}
    assert consumer._n_acked == 5
    assert all(m.acked for m in first)


async def test_overlapping_seeks_resume_held_partitions_once_the_last_has_ended(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A seek back begun before the assignment and the recovery's seek overlap: the held
    stream partitions resume only when both are done, and records fetched meanwhile wait
    (`_seeking`) until then."""
    import asyncio

    from faust.transport.drivers import aiokafka as faust_aiokafka
    from faust.types import TP

    settings, app = _app("worker-seeks", tmp_path)
    consumer = app.consumer
    calls = TP(settings.calls_topic, 0)
    gates = [asyncio.Event(), asyncio.Event()]
    started: list[int] = []
    resumed: list[set[Any]] = []

    async def faust_seek(self: Any) -> None:  # Faust's seek: the broker's answer is awaited
        started.append(len(started))
        await gates[len(started) - 1].wait()

    monkeypatch.setattr(faust_aiokafka.Consumer, "perform_seek", faust_seek)
    monkeypatch.setattr(
        faust_aiokafka.Consumer, "resume_partitions", lambda self, tps: resumed.append(set(tps))
    )
    monkeypatch.setattr(type(consumer), "assignment", lambda self: {calls})

    seek_back = asyncio.create_task(consumer.perform_seek())  # begun during a rebalance
    await asyncio.sleep(0)
    consumer._held.assigned()
    consumer.resume_partitions({calls})  # the recovery asks for its stream partitions
    assert resumed == [set()]
    recovery = asyncio.create_task(consumer.perform_seek())
    await asyncio.sleep(0)
    assert started == [0, 1]
    gates[0].set()
    await seek_back
    assert not consumer._seeking.is_set()  # the recovery's seek still runs
    assert all(not tps for tps in resumed)
    gates[1].set()
    await recovery
    assert consumer._seeking.is_set()
    assert resumed[-1] == {calls}


async def test_acks_of_a_revoked_partition_do_not_count_until_it_is_assigned_again(
    tmp_path: Path,
) -> None:
    """Faust forgets a revoked partition's committed offset: an ack counted then would let a
    commit pass an earlier record still unhandled, or move its next owner's commit."""
    from faust.types import TP
    from faust.types.tuples import Message

    settings, app = _app("worker-revoked-acks", tmp_path)
    consumer = app.consumer
    topic = settings.calls_topic
    kept, other = TP(topic, 0), TP(topic, 1)
    app.topics._acking_topics.add(topic)

    def message(tp: TP, offset: int) -> Message:
        return Message(topic, tp.partition, offset, 0.0, 0, [], b"k", b"{}", None, tp=tp)

    await consumer.on_partitions_revoked({kept, other})
    late = [message(kept, 8), message(other, 3)]
    consumer.track(late[0])
    assert consumer.ack(late[0]) is False
    consumer.ack_all([late[1]])
    assert all(m.acked for m in late) and late[0] not in consumer.unacked
    assert kept not in consumer._acked and other not in consumer._acked
    await consumer.on_partitions_assigned({kept})
    assert consumer.ack(message(kept, 9)) is True
    consumer.ack_all([message(other, 4)])  # still someone else's
    assert list(consumer._acked[kept]) == [9] and other not in consumer._acked


async def test_partition_work_after_a_seek_back_is_none_until_a_record_is_handed_on(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A seek sets Faust's read offset to the offset sought, so read >= committed no longer
    means a record was handed on: an idle partition sought back to its commit must not count
    as work (the stall check reported every such partition as stalled)."""
    from faust.transport.drivers import aiokafka as faust_aiokafka
    from faust.types import TP

    settings, app = _app("worker-partition-work", tmp_path)
    consumer = app.consumer
    topic = settings.calls_topic
    calls, fresh = TP(topic, 0), TP(topic, 1)
    monkeypatch.setattr(type(consumer), "assignment", lambda self: {calls, fresh})

    async def no_client_seek(self: Any, tp: Any, offset: int) -> None:
        return None

    monkeypatch.setattr(faust_aiokafka.Consumer, "_seek", no_client_seek)

    def work() -> dict[Any, bool]:
        return {tp: has for tp, _, has in consumer.partition_work(frozenset({topic}))}

    consumer._committed_offset[calls] = 7
    await consumer.seek(calls, 7)  # back to the commit: nothing handed on past it
    assert consumer._read_offset[calls] == 7
    assert work() == {calls: False, fresh: False}
    await consumer.seek(calls, 9)  # fetched again from 9: 7 and 8 were handed on
    assert work()[calls] is True
    consumer._committed_offset[calls] = 9  # and committed since
    assert work()[calls] is False
    await consumer.seek(fresh, 3)  # never committed: 0..2 were handed on
    assert work()[fresh] is True
