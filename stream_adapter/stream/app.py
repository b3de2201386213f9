"""Build the Faust app of a topology: its topics, the approvals table and two routes.

Faust keeps the group, the table and the commits; each record of the calls topic, and of the
decisions and approval-request topics, goes straight to a route (fastpath.py) that makes it a
job on a KeyedScheduler (ordered per Kafka key, concurrent across keys, at most
`max_in_flight` running) and acks it once its outputs are acknowledged by the broker. Faust
commits the highest contiguous acked offset, so a commit never passes an unfinished call
(SPEC §8, §9).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any, cast

import faust

from stream_adapter import logs
from stream_adapter.executor import Executor
from stream_adapter.retries import RetryPolicy
from stream_adapter.settings import Settings
from stream_adapter.signing import DecisionKeys
from stream_adapter.stream.approvals import ApprovalFlow, ApprovalTable
from stream_adapter.stream.calls import process_call, send_reply
from stream_adapter.stream.commit_gate import CommitGate, OutputSection, current_section
from stream_adapter.stream.commits import patch_new_offset
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.fastpath import FastApp, make_current
from stream_adapter.stream.highwaters import use_broker_highwaters
from stream_adapter.stream.inline import Handoff, InlineCalls
from stream_adapter.stream.keyed import KeyedScheduler, Slots
from stream_adapter.stream.metrics import Metrics
from stream_adapter.stream.outputs import Delivery, Outputs, current_delivery
from stream_adapter.stream.topics import approval_requests_topic
from stream_adapter.stream.tracing import build_tracing
from stream_adapter.stream.transactions import (
    TransactionGuard,
    guard_transactions,
    transactional_id,
)
from stream_adapter.stream.web import MetricsServer

RAW: dict[str, Any] = {"key_serializer": "raw", "value_serializer": "raw"}
PRODUCER_MAX_REQUEST_BYTES = 4 << 20


def _delivery(message: Any) -> Delivery:
    headers = message.headers or {}
    if not isinstance(headers, dict):
        headers = dict(headers)
    return Delivery(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value if message.value is not None else b"",
        headers=headers,
    )


def _order_key(message: Any) -> object:
    """Messages with the same key run in offset order; keyless ones need no order."""
    if message.key is None:
        return (message.topic, message.partition, message.offset)
    return (message.topic, message.partition, message.key)


def _on_job_error(exc: BaseException) -> None:
    logs.event(logs.ERROR, "job crashed", error_kind=type(exc).__name__)
    logs.log.debug("job crash", exc_info=exc)


JOB_RETRY_CAP_S = 30.0


def _job_failed(exc: BaseException | None, message_id: str, attempt: int) -> None:
    """A job failed for a reason not its message's (None: its send was cancelled) and
    goes again."""
    logs.event(
        logs.ERROR,
        "job failed; retrying",
        error_kind=type(exc).__name__ if exc is not None else "Cancelled",
        message_id=message_id,
        attempt=attempt,
    )


async def _until_done(
    app: FastApp, delivery: Delivery, message: Any, process: Callable[[Delivery], Awaitable[None]]
) -> None:
    """Process, then ack; a job that fails for a reason not the message's is tried again.

    Bad messages never raise (the flows answer them); an exception here is the broker or a
    bug. Left unacked, the message would hold its partition's commits until a restart and
    stall the next rebalance, which waits for unacked messages. So: retry with backoff, the
    same as a redelivery would (approved calls still run at most once); when the partition
    is being revoked or the worker stops, hand the message back unacked (the next owner gets
    it from the committed offset). Exactly once, a failure fails the partition's transaction
    instead (transactions.py): the group rejoins and the message is handed back.
    """
    failures = 0
    guard = app.transaction_guard
    while True:
        try:
            await process(delivery)
        except Exception as exc:
            failures += 1
            if guard is not None:
                # Its outputs may be in the partition's transaction: redo it from the commit.
                guard.fail(transactional_id(app, delivery.topic, delivery.partition), exc)
            _job_failed(exc, delivery.message_id, failures)
            logs.log.debug("job failure", exc_info=exc)
            # Exactly once, wait for the rebalance the failure asked for to hand it back.
            backoff_s = min(JOB_RETRY_CAP_S, 0.5 * 2 ** (failures - 1))
            delay_s = JOB_RETRY_CAP_S if guard is not None else backoff_s
            deadline = asyncio.get_running_loop().time() + delay_s
            while asyncio.get_running_loop().time() < deadline:
                if app.should_stop or not getattr(app.consumer, "flow_active", True):
                    app.consumer.unacked.discard(message)  # handed back, never acked
                    return
                await asyncio.sleep(min(0.2, delay_s))
            continue
        app.consumer.ack(message)
        return


Process = Callable[[Delivery], Awaitable[None]]


def _handler(
    app: FastApp,
    scheduler_of: Callable[[], KeyedScheduler],
    process: Process,
    lane: _Lane | None = None,
) -> Callable[[Any], Awaitable[None]]:
    """A route handler: schedule each record as a job, ack it when the job has finished.

    With a lane, a record is first offered to it (stream/inline.py); what the lane hands
    back is scheduled, after any reply of the same key the lane still holds is sent.
    """
    schedulers: list[KeyedScheduler] = []  # built on first use, on the worker's loop

    last_section: dict[tuple[str, int], OutputSection] = {}  # exactly-once: per partition

    async def schedule(message: Any, delivery: Delivery, key: object, work: Process) -> None:
        app.fast_consumer.track(message)
        section = None
        if app.commit_gate is not None:
            tp = (delivery.topic, delivery.partition)
            previous = last_section.get(tp)
            section = OutputSection(app.commit_gate, None if previous is None else previous.done)
            last_section[tp] = section

        async def job() -> None:
            current_delivery.set(delivery)  # this job's own task context
            make_current(message)
            current_section.set(section)
            try:
                await _until_done(app, delivery, message, work)
            finally:
                if section is not None:
                    section.close()

        await schedulers[0].submit(key, job)

    async def on_message(message: Any) -> None:
        if not schedulers:
            schedulers.append(scheduler_of())
        key = _order_key(message)
        work = process
        if lane is not None:
            inline = await lane.get()
            if not schedulers[0].busy(key):
                handoff = inline.offer(message, key)
                if handoff is None:
                    return
                work = lane.resume(handoff)
            if inline.holds(key):
                await inline.flush()  # the key's earlier replies go first (SPEC §9)
        await schedule(message, _delivery(message), key, work)

    redos: set[asyncio.Task[None]] = set()  # held, so none is collected while it waits

    def redo(message: Any, exc: BaseException | None) -> None:
        delivery = _delivery(message)
        _job_failed(exc, delivery.message_id, 1)
        task = asyncio.ensure_future(schedule(message, delivery, _order_key(message), process))
        redos.add(task)
        task.add_done_callback(redos.discard)

    if lane is not None:
        lane.redo = redo
    return on_message


class _Lane:
    """The calls route's inline lane, built on the worker's loop at its first record."""

    def __init__(self, app: FastApp, ctx: FlowContext) -> None:
        self._app = app
        self._ctx = ctx
        self._inline: InlineCalls | None = None
        self.redo: Callable[[Any, BaseException | None], object] = lambda message, exc: None

    async def get(self) -> InlineCalls:
        if self._inline is None:
            inline = InlineCalls(
                self._ctx,
                cast(Any, self._app.producer)._ensure_producer(),
                ack=self._app.fast_consumer.ack_all,
                redo=lambda message, exc: self.redo(message, exc),
            )
            await inline.start()
            self._inline = inline
        return self._inline

    async def flush(self) -> None:
        """The end of a fetch round: send what can go without waiting."""
        if self._inline is not None:
            await self._inline.flush(wait=False)

    async def drain(self) -> None:
        if self._inline is not None:
            await self._inline.drain()

    def resume(self, handoff: Handoff) -> Process:
        """The scheduled work for a call the lane handed on."""
        ctx = self._ctx
        if handoff.reply is not None:
            reply = handoff.reply
            return lambda delivery: send_reply(ctx, delivery, reply)
        envelope, failed = handoff.envelope, handoff.failed
        if envelope is None:
            return lambda delivery: process_call(ctx, delivery)
        return lambda delivery: process_call(ctx, delivery, envelope=envelope, failed=failed)


def build_app(
    settings: Settings,
    executor: Executor,
    *,
    tools: Collection[str] | None = None,
    **faust_options: Any,
) -> faust.App:
    """The Faust app that serves executor's tools on the settings' topics."""
    p = settings.partitions
    app = FastApp(
        settings.app_id,
        broker=settings.broker,
        store="rocksdb://",
        datadir=str(settings.data_dir),
        processing_guarantee=settings.processing_guarantee,
        topic_partitions=p,
        topic_replication_factor=settings.replication_factor,
        web_enabled=False,
        web_port=settings.web_port,
        producer_acks=-1,
        # Faust's 1 000 000 is below what the broker admits on tool-calls (~1 MiB), so a big
        # call could be neither answered nor dead-lettered; a park request carries the call
        # twice (arguments + base64 original), hence the headroom (docs/chaos.md).
        producer_max_request_size=PRODUCER_MAX_REQUEST_BYTES,
        broker_commit_every=1000,
        broker_commit_interval=0.5,
        stream_wait_empty=True,
        # A killed worker's partitions move after this long (Faust's default is 60 s).
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 5),
        topic_disable_leader=False,
        # Exactly-once recovery waits for open transactions to close (highwaters.py); a
        # standby copy of a partition another worker is writing would wait every time.
        table_standby_replicas=0 if settings.processing_guarantee == "exactly_once" else 1,
        **faust_options,
    )
    calls = app.topic(settings.calls_topic, partitions=p, **RAW)
    requests = app.topic(approval_requests_topic(settings), partitions=p, **RAW)
    approvals_channel = app.topic(
        settings.decisions_topic, approval_requests_topic(settings), partitions=p, **RAW
    )
    exactly_once = settings.processing_guarantee == "exactly_once"
    if exactly_once:
        app.commit_gate = CommitGate()  # commits cover a message's outputs and offset, or neither
        use_broker_highwaters()  # Faust's own lose tables after a rebalance (highwaters.py)
        app.transaction_guard = TransactionGuard(lambda: app.fast_consumer.request_rejoin())
        guard_transactions()  # Faust's transactions lose exactly-once (transactions.py)
    patch_new_offset()  # Faust could commit over an unfinished head offset (commits.py)
    outputs = Outputs(
        app,
        replies=app.topic(settings.replies_topic, partitions=p, **RAW),
        dlq=app.topic(settings.dlq_topic, partitions=p, **RAW),
        requests=requests,
        exactly_once=exactly_once,
    )
    table = app.Table(
        "approvals",
        default=None,
        partitions=p,
        changelog_topic=app.topic(
            settings.approvals_topic,
            partitions=p,
            compacting=True,
            deleting=False,
            internal=True,
            **RAW,
        ),
        key_type=bytes,
        value_type=bytes,
    )
    allowed = frozenset(tools) if tools is not None else None
    metrics = Metrics([n for n in executor.registry.names() if allowed is None or n in allowed])
    outputs.metrics = metrics
    ctx = FlowContext(
        settings=settings,
        executor=executor,
        tools=frozenset(tools) if tools is not None else None,
        outputs=outputs,
        policy=RetryPolicy(attempts=settings.retry_attempts, base_s=settings.retry_backoff_s),
        keys=DecisionKeys.parse(settings.decision_keys),
        metrics=metrics,
        tracing=build_tracing(settings.otel_enabled, settings.app_id),
        tool_slots=Slots(settings.max_in_flight),
    )
    approvals = ApprovalTable(table, outputs, app.transaction_guard)
    flow = ApprovalFlow(ctx, approvals, origin=f"kafka:{settings.app_id}")

    def scheduler() -> KeyedScheduler:
        # Jobs waiting for their replies' acks hold no tool slot, so many more may queue.
        return KeyedScheduler(max(4096, 16 * settings.max_in_flight), _on_job_error)

    async def run_call(delivery: Delivery) -> None:
        await process_call(ctx, delivery)

    metrics.watch(
        app,
        table,
        (settings.calls_topic, settings.decisions_topic, approval_requests_topic(settings)),
    )
    # App.service is typed for classes; it starts instances just the same.
    app.service(cast(Any, MetricsServer(metrics, settings.web_host, settings.web_port)))
    inline = settings.processing_guarantee != "exactly_once" and ctx.tracing is None
    lane = _Lane(app, ctx) if inline else None
    if lane is None:
        app.route(calls, _handler(app, scheduler, run_call))
    else:
        app.route(calls, _handler(app, scheduler, run_call, lane), lane.flush, lane.drain)
    app.route(approvals_channel, _handler(app, scheduler, flow.process))
    return app
