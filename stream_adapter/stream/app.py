"""Build a topology's app: its topics, the approvals table, and the routes of its two flows.

The calls topic, and the decisions and approval-request topics, each go to a route
(engine/routes.py) that makes every record a job, ordered per Kafka key, and acks it once its
outputs are acknowledged by the broker; the engine commits the highest contiguous acked
offset, so a commit never passes an unfinished call (contract §8, §9).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from stream_adapter.core.executor import Executor
from stream_adapter.core.retries import RetryPolicy
from stream_adapter.core.signing import DecisionKeys, announce
from stream_adapter.core.tools import ToolNames, allow_list
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.connectivity import BrokerWatch
from stream_adapter.settings import COMMIT_INTERVAL_S, Settings
from stream_adapter.stream.approvals import ApprovalFlow, ApprovalTable
from stream_adapter.stream.calls import process_call
from stream_adapter.stream.context import FlowContext
from stream_adapter.stream.engine import (
    App,
    DurableTable,
    JobRoute,
    Sender,
    Slots,
    faust_connection,
)
from stream_adapter.stream.inline import inline_lane
from stream_adapter.stream.loopwatch import LoopWatch, executor_codes
from stream_adapter.stream.metrics import Metrics
from stream_adapter.stream.outputs import Outputs
from stream_adapter.stream.scopes import Scopes
from stream_adapter.stream.sweeper import Sweeper
from stream_adapter.stream.topics import approval_requests_topic
from stream_adapter.stream.tracing import build_tracing
from stream_adapter.stream.web import MetricsServer

RAW: dict[str, Any] = {"key_serializer": "raw", "value_serializer": "raw"}
PRODUCER_MAX_REQUEST_BYTES = 4 << 20


def _connection(settings: Settings) -> dict[str, Any]:
    options = kafka_clients.client_options(settings)
    return faust_connection(options, kafka_clients.compression_type(settings))


def build_app(
    settings: Settings,
    executor: Executor,
    *,
    tools: ToolNames | None = None,
    **faust_options: Any,
) -> App:
    """The app that serves executor's tools on the settings' topics."""
    p = settings.partitions
    app = App(
        settings.app_id,
        broker=settings.broker,
        store="rocksdb://",
        datadir=str(settings.tables_dir),
        processing_guarantee=settings.processing_guarantee,
        topic_partitions=p,
        topic_replication_factor=settings.replication_factor,
        web_enabled=False,
        # Faust's own server stays off; its port only names this worker in the group's
        # metadata (canonical_url), and Faust refuses 0, which turns our metrics server off.
        **({"web_port": settings.web_port} if settings.web_port else {}),
        producer_acks=-1,
        # Faust's 1 000 000 is below MAX_RECORD_BYTES, which every record the worker writes
        # is checked against before it is sent (engine's `check_size`); this stays above it.
        producer_max_request_size=PRODUCER_MAX_REQUEST_BYTES,
        broker_commit_every=1000,
        broker_commit_interval=COMMIT_INTERVAL_S[settings.processing_guarantee],
        stream_wait_empty=True,
        # A killed worker's partitions move after this long (Faust's default is 60 s).
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 5),
        topic_disable_leader=False,
        # Each table partition is also kept up to date on one more worker, so a failover
        # restores only the tail (exactly once too: standby highwaters do not wait for open
        # transactions, engine/recovery.py).
        table_standby_replicas=1,
        # Credentials, TLS and compression: the same as every other client (kafka_clients).
        **{**_connection(settings), **faust_options},
    )
    calls = app.topic(settings.calls_topic, partitions=p, **RAW)
    approvals_channel = app.topic(
        settings.decisions_topic, approval_requests_topic(settings), partitions=p, **RAW
    )
    sender = Sender(app)
    outputs = Outputs(
        sender,
        replies=settings.replies_topic,
        dlq=settings.dlq_topic,
        requests=approval_requests_topic(settings),
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
    # Only the worker that owns an approvals partition now writes its records (zombies are
    # fenced: engine/claims.py).
    claims = app.partition_claims((settings.decisions_topic, approval_requests_topic(settings)))
    approvals_store = DurableTable(table, sender, app.transaction_guard, claims)
    allowed = allow_list(tools)
    keys = DecisionKeys.from_settings(settings)
    served = [n for n in executor.registry.names() if allowed is None or n in allowed]
    metrics = Metrics(served, approval_age_limit_s=settings.pending_approval_age_limit_s)
    outputs.metrics = metrics
    ctx = FlowContext(
        settings=settings,
        executor=executor,
        tools=allowed,
        outputs=outputs,
        policy=RetryPolicy(attempts=settings.retry_attempts, base_s=settings.retry_backoff_s),
        keys=keys,
        metrics=metrics,
        tracing=build_tracing(settings.otel_enabled, settings.app_id),
        tool_slots=Slots(settings.max_in_flight),
        scopes=Scopes(sender.topic_scope, lambda: app.assignments),
    )
    assert ctx.scopes is not None
    # The calls topic's id is learnt as partitions are assigned, before their first record:
    # until it is known, the inline lane hands every call to the scheduled path.
    app.assignment_hooks.append(partial(ctx.scopes.prime, settings.calls_topic))
    flow = ApprovalFlow(
        ctx,
        ApprovalTable(approvals_store),
        origin=f"kafka:{settings.app_id}",
        requests_pending=partial(app.has_work, approval_requests_topic(settings)),
    )

    inputs = frozenset(
        (settings.calls_topic, settings.decisions_topic, approval_requests_topic(settings))
    )
    metrics.watch(
        partial(app.lags, inputs),
        approvals_store.values,
        stuck=app.stuck_partitions,
        unknown_age_limit_s=settings.unknown_outcome_age_limit_s,
    )
    sweeper = Sweeper(settings, approvals_store.values, outputs)
    app.add_service(sweeper.start, sweeper.stop)
    broker = BrokerWatch.for_settings(settings)  # one state line per outage, clients quieted
    app.add_service(broker.start, broker.stop)
    metrics.watch_broker(broker.status)
    server = MetricsServer(
        metrics, settings.web_host, settings.web_port, app.stuck_partitions, broker.status
    )
    app.add_service(server.start, server.stop)
    loop_watch = LoopWatch(
        executor_codes(executor),
        stall_s=settings.loop_stall_s,
        session_timeout_s=settings.session_timeout_s,
    )

    async def watch_loop() -> None:
        loop_watch.start()

    app.add_service(watch_loop, loop_watch.stop)
    metrics.watch_loop(loop_watch)
    stall_watch = app.watch_stalls(settings.partition_stall_s)
    metrics.watch_stalls(stall_watch.stalled, lambda: stall_watch.stalls_total, sorted(inputs))
    confirms = any(executor.registry.get(name).confirm for name in served)

    async def announce_keys() -> None:
        announce(keys, decides=confirms)

    app.add_service(announce_keys, _nothing)

    # Jobs waiting for their replies' acks hold no tool slot, so many more may queue.
    max_queued = max(4096, 16 * settings.max_in_flight)
    inline = ctx.tracing is None  # a traced call gets its own span
    JobRoute(
        app,
        partial(process_call, ctx),
        max_queued=max_queued,
        lane=partial(inline_lane, ctx) if inline else None,
    ).subscribe(calls)
    JobRoute(app, flow.process, max_queued=max_queued).subscribe(approvals_channel)
    return app


async def _nothing() -> None:
    """A service hook with nothing to do."""
