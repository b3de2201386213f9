"""Faust's aiokafka consumer "thread", run as a service in the worker's own event loop.

Faust runs the aiokafka consumer in a thread with its own loop, and every fetch, commit and
seek crosses over: a queued call, two self-pipe wake-ups and a GIL hand-off each way, most of
a fast call's latency (figures in docs/bench.md). In one loop, aiokafka's fetcher, heartbeat
and rebalance tasks interleave with the worker's code like any other task; a round yields at
least every `ROUND_SLICE_S` (consumer.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiokafka.errors import ConsumerStoppedError
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.utils.futures import maybe_async

from stream_adapter.stream.engine.stuck import StuckPartitions

FETCH_MAX_WAIT_MS = 100
"""Longest the broker holds a fetch that finds no records. The broker answers one request
per connection at a time, so a table recovery's offset lookups wait behind a fetch in flight
on idle partitions: with Faust's 1,500 ms, each of a recovery's three lookups took about
1.4 s (a worker at exactly once, started on a backlog, answered its first call 5 s after it
was assigned its partitions)."""


class LoopConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """The consumer "thread" whose loop is the caller's: `call_thread` is a plain await."""

    def __init__(self, consumer: Any, **kwargs: Any) -> None:
        loop = kwargs.get("loop") or asyncio.get_event_loop()
        super().__init__(consumer, thread_loop=loop, **kwargs)
        self._serving: asyncio.Future[None] | None = None  # the loop keeps tasks weakly

    async def start(self) -> None:
        """Serve as mode's thread would, as a task of this loop; return once started."""
        assert not self._thread_started.is_set()
        self._thread_started.set()
        running: asyncio.Future[None] = asyncio.Future(loop=self.parent_loop)
        self._thread_running = running
        self._serving = asyncio.ensure_future(self._serve())
        try:
            await running
        finally:
            self._thread_running = None

    def _create_worker_consumer(self, transport: Any) -> Any:
        """Faust's consumer, but reading committed records only, whatever the guarantee.

        Faust reads uncommitted records unless the app itself is exactly-once, so calls a
        producer wrote in a transaction and then aborted would run. Where no producer uses
        transactions the two levels read the same records, as soon. Its fetches wait at most
        `FETCH_MAX_WAIT_MS` for records.
        """
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"  # the fetcher takes it at start()
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # Faust's is 1,500
        return consumer

    async def _fetch_records(
        self,
        consumer: Any,
        active_partitions: set[Any] | None,
        timeout: float | None = None,  # noqa: ASYNC109 (Faust calls it so)
        max_records: int | None = None,
    ) -> Any:
        """Faust's fetch, with an error of one partition kept to that partition.

        Faust's own asks aiokafka for every active partition at once, and a batch it cannot
        decode or a partition's fetch error is raised for all of them (stuck.py). Here each
        buffered result is guarded first, and stuck partitions rest between tries.
        """
        if not self.consumer.flow_active:
            return {}
        fetcher = consumer._fetcher
        if consumer._closed or fetcher._closed:
            raise ConsumerStoppedError()
        stuck: StuckPartitions = cast(Any, self.consumer).stuck  # a FastConsumer
        subscriptions = fetcher._subscriptions
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or 0.0)
        with subscriptions.fetch_context():
            while True:
                wanted = None if active_partitions is None else active_partitions - stuck.resting()
                if wanted is not None and not wanted:  # every partition is resting
                    await asyncio.sleep(max(0.0, min(deadline - loop.time(), 1.0)))
                    return {}
                stuck.guard(fetcher._records, wanted)
                records = await fetcher.fetched_records(wanted, timeout=0, max_records=max_records)
                stuck.settle(lambda tp: _position(subscriptions, tp))
                if records:
                    stuck.served(records)
                    return records
                left = deadline - loop.time()
                if left <= 0 or fetcher._closed:
                    return {}
                waiter = fetcher._create_fetch_waiter()
                done, _ = await asyncio.wait([waiter], timeout=left)
                if not done:
                    waiter.cancel()
                    return {}
                waiter.result()  # an error of the whole consumer (the group's authorization)

    async def call_thread(
        self, fun: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any
    ) -> Any:
        return await maybe_async(fun(*args, **kwargs))

    async def _shutdown_thread(self) -> None:
        """mode's, but the app's stop is told the consumer is down however its stop ended.

        mode signals it only after the consumer's stop returns; with the broker gone that stop
        can end in a CancelledError, and SIGTERM would then wait out the app's whole shutdown
        timeout (tests/integration/test_stop_without_broker.py).
        """
        try:
            await self.on_thread_stop()
            await self._default_stop_children()
        finally:
            self.set_shutdown()
        await self._default_stop_futures()
        await self._default_stop_exit_stacks()

    async def _gather_remaining_tasks(self) -> None:
        """mode sweeps its thread loop's tasks on stop; this loop's tasks are the app's."""


def _position(subscriptions: Any, tp: Any) -> int:
    """The consumer's fetch position of tp; -1 when it has none."""
    try:
        position = subscriptions.subscription.assignment.state_value(tp).position
    except (AttributeError, KeyError):
        return -1
    return -1 if position is None else int(position)
