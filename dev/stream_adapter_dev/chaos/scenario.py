"""The chaos run: a paced call mix while workers are SIGKILLed, the broker restarts (or, on a
three-node cluster, the busiest leader and the transaction coordinator are SIGKILLed and all
nodes restart one by one), and the group scales 1 -> 2 -> 1; then the figures (report.py).

Faults happen one after another at random points of the load (a fraction of the calls sent),
each followed by a recovery probe: one echo call per partition, sent right after the fault.
The time to recover is from the fault until every probe has its reply, i.e. until every
partition is served again.

A kill-while-running fault waits until an approved call of its tool is running in a worker
(the demo tools' run journal, running.py) and SIGKILLs that worker then, so both rules for an
approved call whose worker died (an idempotent one runs again, another ends `unknown`) are
exercised in every run, not by luck.

A worker is cut off for longer than the session timeout, alive, in two ways: paused (SIGSTOP,
then SIGCONT) or partitioned from the broker (its slot's proxy blackholed, then healed,
proxy.py); at random, or while an approved call runs, before or after its effect. Its
partitions move meanwhile and it comes back as a zombie.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stream_adapter.core import logs
from stream_adapter.core.signing import DecisionKeys
from stream_adapter.settings import Settings

from .cluster_faults import ClusterControl
from .environment import create_run_topics, run_settings
from .harness import BrokerControl, Worker, WorkerPool
from .load import (
    APPROVED,
    AutoReviewer,
    CallSender,
    CallSpec,
    call_arguments,
    call_mix,
    producer_for,
)
from .observe import ReplyReader, read_topic, settle_lag
from .ownership import events_from_log, non_owner_runs, owner_at
from .proxy import BlackholeProxy
from .report import (
    TERMINAL,
    ChaosFigures,
    FaultRecord,
    KilledRun,
    WorkerKill,
    approved_figures,
    duplicate_examples,
    in_the_dark,
    killed_figures,
    ledger_counts,
    longest_gap,
    pending_records,
    reply_figures,
)
from .running import LATENCY_ENV, RUNS_ENV, TOPOLOGY, RunJournal
from .tables import disagreements, latest_records, partition_of_calls, read_store, store_path

SCALE_UP, KILL, BROKER, SCALE_DOWN = (
    "scale-up 1->2",
    "worker SIGKILL",
    "broker restart",
    "scale-down 2->1",
)
LEADER_KILL, ROLLING, COORDINATOR_KILL = (
    "leader SIGKILL + restart",
    "rolling restart",
    "coordinator SIGKILL + restart",
)
CLUSTER_FAULTS = (LEADER_KILL, ROLLING, COORDINATOR_KILL)


def kill_running(tool: str) -> str:
    """The kill-while-running fault for tool."""
    return f"SIGKILL while {tool} runs"


KILL_RUNNING = {kill_running(tool): tool for tool in APPROVED}


PAUSE, PARTITION = "worker SIGSTOP", "worker partitioned"
"""A random live worker paused (SIGSTOP, SIGCONT), or cut off from the broker (its proxy
blackholed, healed), past the session timeout."""
BEFORE, AFTER = "before", "after"
PHASES = {BEFORE: False, AFTER: True}
"""A running fault's phase (`tool/before`, `tool/after`): the run's effect not yet, or already,
recorded; a tool named alone draws it from the seed."""


def pause_running(spec: str) -> str:
    """The pause-while-running fault for spec (`tool` or `tool/phase`)."""
    tool, _, phase = spec.partition("/")
    return f"SIGSTOP while {tool} runs" + (f", {phase} its effect" if phase else "")


def partition_running(spec: str) -> str:
    """The partition-while-running fault for spec (`tool` or `tool/phase`)."""
    tool, _, phase = spec.partition("/")
    return f"partitioned while {tool} runs" + (f", {phase} its effect" if phase else "")


def _specs(tool: str) -> tuple[str, ...]:
    return (tool, f"{tool}/{BEFORE}", f"{tool}/{AFTER}")


PAUSE_RUNNING = {pause_running(s): s for tool in APPROVED for s in _specs(tool)}
PARTITION_RUNNING = {partition_running(s): s for tool in APPROVED for s in _specs(tool)}
PAUSE_MARGIN_S = 4.0
"""How much longer than the session timeout a paused or partitioned worker stays cut off."""


@dataclass(frozen=True, slots=True)
class ChaosOptions:
    """How big, how fast and how hostile a run is."""

    calls: int = 5000
    rate: float = 40.0  # calls per second
    kills: int = 3
    broker_restart: bool = True
    """The broker faults: a restart of the single broker, or all of CLUSTER_FAULTS."""
    broker_down_s: float = 3.0
    brokers: int = 1
    cluster_faults: tuple[str, ...] = CLUSTER_FAULTS
    """Which cluster faults (coordinator kills happen in exactly-once runs only)."""
    node_down_s: float = 15.0
    """How long a SIGKILLed node of a cluster stays down."""
    scale: bool = True
    steady_load: bool = False
    """Keep sending past `calls` until the last fault has recovered (the reply gaps then
    measure outages, not the end of the load)."""
    guarantee: str = "at_least_once"
    partitions: int = 8
    session_timeout_s: float = 10.0
    max_seconds: float = 1800.0
    recover_timeout_s: float = 120.0
    seed: int | None = None
    running_kills: tuple[str, ...] = tuple(APPROVED)
    """One kill-while-running fault per tool named (an approved tool of the demo)."""
    running_pauses: tuple[str, ...] = ()
    """One pause-while-running fault per spec (`tool`, `tool/before`, `tool/after`): the
    worker running it is SIGSTOPped for longer than the session timeout, then SIGCONTed, and
    wakes up as a zombie."""
    pauses: int = 0
    """Pauses of a random live worker, past the session timeout."""
    running_net_partitions: tuple[str, ...] = ()
    """One partition-while-running fault per spec (as running_pauses): the worker running it
    is cut off from the broker (alive) past the session timeout, then reconnected."""
    net_partitions: int = 0
    """Network partitions of a random live worker from the broker, past the session timeout
    (a broker this run started only: it needs the slots' listeners)."""
    tool_latency_s: float = 0.4
    """The confirm tools' external-API latency (`STREAM_ADAPTER_DEMO_TOOL_LATENCY_S`): the
    window a kill-while-running fault hits."""


def fault_plan(
    rng: random.Random,
    kills: int,
    broker_faults: list[str],
    scale: bool = True,
    running_kills: tuple[str, ...] = (),
    running_pauses: tuple[str, ...] = (),
    pauses: int = 0,
    net_partitions: int = 0,
    running_net_partitions: tuple[str, ...] = (),
) -> list[tuple[float, str]]:
    """(fraction of calls sent, fault): scale up early, down late, the rest between, shuffled."""
    middle = [KILL] * kills + [kill_running(tool) for tool in running_kills] + broker_faults
    middle += [pause_running(spec) for spec in running_pauses] + [PAUSE] * pauses
    middle += [partition_running(spec) for spec in running_net_partitions]
    middle += [PARTITION] * net_partitions
    rng.shuffle(middle)
    plan = [(rng.uniform(0.05, 0.15), SCALE_UP)] if scale else []
    width = 0.58 / max(1, len(middle))
    for i, kind in enumerate(middle):
        plan.append((0.2 + width * (i + rng.uniform(0.2, 0.8)), kind))
    if scale:
        plan.append((rng.uniform(0.82, 0.9), SCALE_DOWN))
    return plan


def broker_faults(options: ChaosOptions, restartable: bool) -> list[str]:
    """The run's broker faults: none for a given broker, else its single or cluster faults."""
    if not (options.broker_restart and restartable):
        return []
    if options.brokers == 1:
        return [BROKER]
    exactly_once = options.guarantee == "exactly_once"
    return [f for f in options.cluster_faults if f != COORDINATOR_KILL or exactly_once]


class ChaosRun:
    """One run: its settings, processes, load, and the faults it caused."""

    def __init__(
        self, options: ChaosOptions, broker: BrokerControl | ClusterControl, workdir: Path
    ) -> None:
        self.options = options
        self.broker = broker
        self.workdir = workdir
        self.rng = random.Random(options.seed)
        self.settings: Settings = run_settings(
            broker.bootstrap,
            workdir,
            "chaos",
            partitions=options.partitions,
            processing_guarantee=options.guarantee,
            session_timeout_s=options.session_timeout_s,
            retry_backoff_s=0.05,
            replication_factor=broker.nodes if isinstance(broker, ClusterControl) else 1,
        )
        self.ledger = workdir / "ledger.jsonl"
        self.journal = RunJournal(workdir / "runs.jsonl")
        self.proxies: dict[str, BlackholeProxy] = {}
        """Per worker slot, the proxy its traffic to the broker crosses (a broker started by
        the run only: a given one has no slot listeners, and the partition faults are left
        out)."""
        slot_env: dict[str, dict[str, str]] = {}
        if isinstance(broker, BrokerControl):
            for name, (port, proxy_port) in broker.slot_listeners.items():
                self.proxies[name] = BlackholeProxy(proxy_port, port)
                slot_env[name] = {"STREAM_ADAPTER_BROKER": f"127.0.0.1:{proxy_port}"}
        self.pool = WorkerPool(
            self.settings,
            workdir / "workers",
            {
                "STREAM_ADAPTER_TOPOLOGY": TOPOLOGY,
                "STREAM_ADAPTER_DEMO_LEDGER": str(self.ledger),
                RUNS_ENV: str(self.journal.path),
                LATENCY_ENV: str(options.tool_latency_s),
            },
            slot_env=slot_env,
        )
        self.exactly_once = options.guarantee == "exactly_once"
        self.reader = ReplyReader(self.settings, read_committed=self.exactly_once)
        self.sent = 0
        self.sent_changed = asyncio.Event()
        self.faults: list[FaultRecord] = []
        self.kills = 0
        self.pauses = 0
        self.net_partitions = 0
        self.disagreements: list[str] = []
        self.non_owner_runs: list[str] = []
        self.revoked_runs: list[str] = []
        self.worker_kills: list[WorkerKill] = []
        self.extra_calls: list[CallSpec] = []
        """Calls a kill-while-running fault sent of its own (part of the figures)."""
        self.started = time.monotonic()
        self.started_ms = int(time.time() * 1000)  # for the replies' record timestamps
        self.faults_done = asyncio.Event()
        # Calls beyond options.calls (see _produce) come from their own generator, so the
        # faults drawn from self.rng stay the same for a seed.
        self.more_rng = random.Random(None if options.seed is None else options.seed + 1)

    def _terminal(self, call_id: str) -> bool:
        return any(r.get("status") in TERMINAL for r in self.reader.by_call.get(call_id, ()))

    async def _produce(self, sender: CallSender, calls: list[CallSpec]) -> None:
        """Send the calls at the configured rate (the pacing is the point, so it sleeps).

        With `steady_load`, while faults are still under way after the last call, more of the
        same mix follow (appended to calls), so every fault and its recovery happen under load.
        """
        start = time.monotonic()
        i = 0
        steady = self.options.steady_load
        while i < len(calls) or (steady and not self.faults_done.is_set()):
            if i == len(calls):
                calls.extend(call_mix(max(1, int(self.options.rate * 5)), self.more_rng))
            delay = start + i / self.options.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            call = calls[i]
            await sender.send(call.envelope(), key=call.run_id.encode())
            i += 1
            self.sent = i
            self.sent_changed.set()

    async def _sent_at_least(self, count: int) -> None:
        while self.sent < count:
            self.sent_changed.clear()
            await self.sent_changed.wait()

    async def _probe(self, sender: CallSender, since: float) -> float | None:
        """One echo per partition; seconds from `since` until all are answered (None: never)."""
        tag = uuid.uuid4().hex[:8]
        probes = [
            CallSpec("echo", {"probe": p}, f"probe-{tag}-{p}", f"probe-{tag}-{p}")
            for p in range(self.settings.partitions)
        ]
        await asyncio.gather(
            *(
                sender.send(probe.envelope(), key=probe.run_id.encode(), partition=p)
                for p, probe in enumerate(probes)
            )
        )
        answered = await self.reader.until(
            lambda: all(self._terminal(p.call_id) for p in probes),
            timeout_s=self.options.recover_timeout_s,
        )
        return time.monotonic() - since if answered else None

    async def _fault(self, kind: str, sender: CallSender) -> None:
        at = time.monotonic()
        target = ""
        action: Callable[[], Coroutine[Any, Any, object]] | None = None
        if kind == SCALE_UP:
            target = "w2"
            action = lambda: self.pool.start("w2")  # noqa: E731
        elif kind == KILL:
            victim = self.rng.choice(self.pool.live())
            target = victim.name
            self._sigkill(victim, kind, None)
            action = lambda: self.pool.start(victim.name)  # noqa: E731 - a supervisor restarts it
        elif kind in KILL_RUNNING:
            killed, target = await self._kill_running(kind, KILL_RUNNING[kind], sender)
            at = time.monotonic()  # the kill, once the wait for a running call is over
            if killed is not None:
                action = lambda: self.pool.start(killed.name)  # noqa: E731
        elif kind in PAUSE_RUNNING or kind in PARTITION_RUNNING:
            pause = kind in PAUSE_RUNNING
            spec = PAUSE_RUNNING[kind] if pause else PARTITION_RUNNING[kind]
            target = await self._cut_off_running(spec, pause, sender)
            at = time.monotonic()  # the wake-up: the zombie's run goes on from here
        elif kind in (PAUSE, PARTITION):
            victim = self.rng.choice(self.pool.live())
            target = victim.name
            await self._cut_off(victim, pause=kind == PAUSE)
            at = time.monotonic()
        elif kind == BROKER and isinstance(self.broker, BrokerControl):
            target = "broker"
            await self.broker.kill()
            await asyncio.sleep(self.options.broker_down_s)  # the outage itself
            await self.broker.start_again()
        elif kind in CLUSTER_FAULTS and isinstance(self.broker, ClusterControl):
            target, action = await self._cluster_fault(kind, self.broker)
        elif kind == SCALE_DOWN:
            victim = self.rng.choice(self.pool.live())
            target = victim.name
            await self.pool.stop(victim)
        logs.event(logs.INFO, "chaos fault", event=kind, tool=target)
        # Probe at once (the outage) and again once the fault's follow-up (a restart, a new
        # member) is done, since that starts a rebalance of its own; recovered when both answer.
        restart: asyncio.Task[object] | None = None
        if action is not None:
            restart = asyncio.create_task(action())
        recover = await self._probe(sender, at)
        if restart is not None:
            await restart
            if recover is not None:
                recover = await self._probe(sender, at)
        self.faults.append(FaultRecord(kind, target, round(at - self.started, 2), recover))

    def _sigkill(self, victim: Worker, kind: str, planned_tool: str | None) -> WorkerKill:
        """SIGKILL victim and record the approved runs its death cut off (the journal's runs
        started in its process and not ended; their effects as the ledger has them now)."""
        pid = victim.pid
        self.pool.kill(victim)
        self.kills += 1
        self.journal.refresh()
        ledger = ledger_counts(self.ledger)
        cut = self.journal.cut_off(pid) if pid is not None else []
        record = WorkerKill(
            kind,
            victim.name,
            planned_tool,
            tuple(KilledRun(r.tool, r.call_id, ledger.get(r.call_id, 0) > 0) for r in cut),
        )
        self.worker_kills.append(record)
        return record

    async def _send_own_call(self, tool: str, sender: CallSender) -> str:
        """One call of tool for a kill-while-running fault, so a run comes even once the mix
        has all been sent; its call_id."""
        tag = uuid.uuid4().hex[:12]
        own = CallSpec(
            tool, call_arguments(tool, self.rng, tag), f"run-kill-{tag}", f"call-kill-{tag}"
        )
        self.extra_calls.append(own)
        await sender.send(own.envelope(), key=own.run_id.encode())
        return own.call_id

    def _ended(self, call_id: str) -> bool:
        """A run of call_id has ended or was cut off: a fault waiting for it missed its window (a
        loaded machine can leave the watcher asleep through a whole phase of the latency)."""
        return any(r.call_id == call_id and (r.ended or r.cut) for r in self.journal.runs.values())

    async def _kill_running(
        self, kind: str, tool: str, sender: CallSender
    ) -> tuple[Worker | None, str]:
        """Wait until an approved call of tool is running in a live worker, then SIGKILL that
        worker; (the worker killed, or None when none was found in time, and the fault's target).

        Whether the run is caught before or after its effect is drawn from the run's seed. A call
        of the tool is sent first, so one comes even once the mix has all been sent.
        """
        after_effect = self.rng.random() < 0.5
        phase = "after its effect" if after_effect else "before its effect"
        deadline = time.monotonic() + self.options.recover_timeout_s
        own = await self._send_own_call(tool, sender)
        while time.monotonic() < deadline:
            self.journal.refresh()
            live = {w.pid: w for w in self.pool.live() if w.pid is not None}
            runs = [r for r in self.journal.running(live, tool) if r.effect == after_effect]
            if not runs and self._ended(own):
                own = await self._send_own_call(tool, sender)
            if runs:  # the newest: the most of its latency still ahead
                victim = live[runs[0].pid]
                killed = self._sigkill(victim, kind, tool)
                if killed.found:
                    return victim, f"{victim.name}, {tool} {runs[0].call_id} {phase}"
                # The run ended between the journal's read and the kill: that kill counts as a
                # random one, and the fault tries again on a fresh call once the slot is back.
                self.worker_kills[-1] = dataclasses.replace(killed, planned_tool=None)
                await self.pool.start(victim.name)
                own = await self._send_own_call(tool, sender)
                continue
            await asyncio.sleep(0.01)
        self.worker_kills.append(WorkerKill(kind, "", tool))
        return None, f"no {tool} found running {phase}"

    async def _cut_off(self, victim: Worker, *, pause: bool) -> None:
        """Cut victim off past the session timeout, alive: SIGSTOP then SIGCONT, or its proxy
        blackholed then healed. Its partitions move meanwhile; it comes back a zombie."""
        hold_s = self.options.session_timeout_s + PAUSE_MARGIN_S
        if pause:
            assert victim.pid is not None
            pid = victim.pid
            os.kill(pid, signal.SIGSTOP)
            self.pauses += 1
            try:
                await asyncio.sleep(hold_s)
            finally:
                os.kill(pid, signal.SIGCONT)
            return
        proxy = self.proxies[victim.name]
        proxy.blackhole()
        self.net_partitions += 1
        try:
            await asyncio.sleep(hold_s)
        finally:
            proxy.heal()

    async def _cut_off_running(self, spec: str, pause: bool, sender: CallSender) -> str:
        """Wait until an approved call of spec's tool runs in a live worker (before or after
        its effect: spec's phase, else drawn from the seed), then cut that worker off
        (`_cut_off`). The fault's target."""
        tool, _, wanted = spec.partition("/")
        drawn = self.rng.random() < 0.5
        after_effect = PHASES[wanted] if wanted else drawn
        phase = "after its effect" if after_effect else "before its effect"
        deadline = time.monotonic() + self.options.recover_timeout_s
        own = await self._send_own_call(tool, sender)
        while time.monotonic() < deadline:
            self.journal.refresh()
            live = {w.pid: w for w in self.pool.live() if w.pid is not None}
            runs = [r for r in self.journal.running(live, tool) if r.effect == after_effect]
            if not runs and self._ended(own):
                own = await self._send_own_call(tool, sender)
            if runs:
                victim = live[runs[0].pid]
                await self._cut_off(victim, pause=pause)
                return f"{victim.name}, {tool} {runs[0].call_id} {phase}"
            await asyncio.sleep(0.01)
        return f"no {tool} found running {phase}"

    async def _cluster_fault(
        self, kind: str, broker: ClusterControl
    ) -> tuple[str, Callable[[], Coroutine[Any, Any, object]]]:
        """Hit the cluster; (the target's name, the follow-up that brings it back)."""
        if kind == ROLLING:

            async def one_by_one() -> None:
                for node_id in broker.config.node_ids:
                    await broker.terminate_node(node_id)
                    await broker.restart_node(node_id)

            return "every node, one by one", one_by_one
        if kind == LEADER_KILL:
            topics = [self.settings.calls_topic, self.settings.replies_topic]
            node_id, count = await broker.busiest_leader(topics)
            target = f"node {node_id} (leads {count} of {2 * self.settings.partitions})"
        else:
            node_id, count = await broker.transaction_coordinator(
                self.settings, f"{self.settings.app_id}-"
            )
            target = f"node {node_id} (coordinates {count} of the group's transaction logs)"
        await broker.kill_node(node_id)

        async def back() -> None:
            await asyncio.sleep(self.options.node_down_s)  # the outage itself
            await broker.restart_node(node_id)

        return target, back

    async def _faults(self, sender: CallSender) -> None:
        plan = fault_plan(
            self.rng,
            self.options.kills,
            broker_faults(self.options, self.broker.restartable),
            self.options.scale,
            self.options.running_kills,
            self.options.running_pauses,
            self.options.pauses,
            self.net_partitions_planned,
            self.options.running_net_partitions if self.proxies else (),
        )
        try:
            for fraction, kind in plan:
                await self._sent_at_least(max(1, int(fraction * self.options.calls)))
                await self._fault(kind, sender)
        finally:
            self.faults_done.set()

    @property
    def net_partitions_planned(self) -> int:
        """Random partitions: none when the broker has no slot listeners (a given broker)."""
        return self.options.net_partitions if self.proxies else 0

    async def _supervise(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            await self.pool.supervise()

    async def run(self) -> ChaosFigures:
        """Run the load and the faults; wait for the outcome; compute the figures."""
        deadline = self.started + self.options.max_seconds
        await create_run_topics(self.settings)
        keys = DecisionKeys.from_settings(self.settings)
        producer = producer_for(self.settings)
        await producer.start()
        sender = CallSender(self.settings, producer)
        reviewer = AutoReviewer(sender, keys)
        self.reader.hooks.append(reviewer.on_reply)
        await self.reader.start()
        reviewer.start()
        calls = call_mix(self.options.calls, self.rng)
        supervisor: asyncio.Task[None] | None = None
        try:
            for proxy in self.proxies.values():
                await proxy.start()
            await self.pool.start("w1")
            supervisor = asyncio.create_task(self._supervise())
            work = asyncio.gather(self._produce(sender, calls), self._faults(sender))
            try:
                await asyncio.wait_for(work, max(1.0, deadline - time.monotonic()))
            except TimeoutError:
                logs.event(logs.ERROR, "chaos run hit its time limit before the load was sent")
            await self.reader.until(
                lambda: all(self._terminal(c.call_id) for c in (*calls, *self.extra_calls)),
                timeout_s=max(1.0, deadline - time.monotonic()),
            )
            answered_at = time.monotonic()
            lag = await settle_lag(self.settings, timeout_s=max(10.0, deadline - time.monotonic()))
            duration = time.monotonic() - self.started
            changelog = await self._compare_tables(deadline)
        finally:
            try:
                if supervisor is not None:
                    supervisor.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await supervisor
                await reviewer.stop()
                await self.reader.stop()
                await producer.stop()
            finally:
                try:
                    await self.pool.stop_all()
                finally:
                    for proxy in self.proxies.values():
                        await proxy.stop()
        self.journal.refresh()
        self.non_owner_runs, self.revoked_runs = non_owner_runs(
            self.journal.runs.values(), partition_of_calls(changelog), self._owner_events()
        )
        figures = self._figures(
            [*calls, *self.extra_calls], lag, duration, changelog, sender.resends
        )
        figures.longest_reply_gap_s, figures.faults = self._gaps(answered_at)
        return figures

    def _owner_events(self) -> list[Any]:
        """Every slot's logged assignments and revocations of the decisions topic (co-
        partitioned with the approvals changelog and claimed with it)."""
        topic = self.settings.decisions_topic
        return [
            event
            for worker in self.pool.workers.values()
            for event in events_from_log(worker.log_path, worker.lives, topic)
        ]

    async def _compare_tables(self, deadline: float) -> list[Any]:
        """Compare each approvals partition's owner's store with the changelog, once the
        run is quiet; again (a commit may still be landing) until they agree or 30 s pass.
        The changelog as last read (read committed)."""
        until = min(deadline, time.monotonic() + 30.0)
        while True:
            changelog = await read_topic(
                self.settings, self.settings.approvals_topic, read_committed=True
            )
            self.disagreements = await asyncio.to_thread(self._disagreements, changelog)
            if not self.disagreements or time.monotonic() > until:
                return changelog
            await asyncio.sleep(1.0)

    def _disagreements(self, changelog: list[Any]) -> list[str]:
        """`partition/key` of each record whose owner's store differs from the changelog."""
        latest = latest_records(changelog)
        events = self._owner_events()
        by_pid = {w.pid: w for w in self.pool.live() if w.pid is not None}
        now = time.time()
        out = []
        for partition in range(self.settings.partitions):
            owner = by_pid.get(owner_at(events, partition, now) or -1)
            if owner is None:
                out.append(f"{partition}/(no live owner)")
                continue
            path = store_path(owner.workdir / f"{owner.name}-data", "approvals", partition)
            store = read_store(path) if path is not None else {}
            keys = disagreements(store, latest.get(partition, {}))
            out.extend(f"{partition}/{key}" for key in keys)
        return out

    def _gaps(self, answered_at: float) -> tuple[float, list[FaultRecord]]:
        """The longest time without a reply, over the run and within each fault's recovery."""
        arrivals = self.reader.arrivals
        overall = longest_gap(arrivals, arrivals[0], answered_at) if arrivals else 0.0
        faults = []
        for fault in self.faults:
            start = self.started + fault.at_s
            end = start + (fault.recover_s if fault.recover_s is not None else 0.0)
            gap = longest_gap(arrivals, start, max(end, start))
            faults.append(dataclasses.replace(fault, gap_s=round(gap, 2)))
        return round(overall, 2), faults

    def _figures(
        self,
        calls: list[CallSpec],
        lag: int,
        duration: float,
        changelog: list[object],
        resends: int,
    ) -> ChaosFigures:
        replies = reply_figures(calls, self.reader.by_call)
        pending = pending_records(changelog)
        by_approval = {
            r["approval_id"]: r["call_id"]
            for rs in self.reader.by_call.values()
            for r in rs
            if r.get("approval_id")
        }
        asked_twice = set(replies.asked_twice)
        asked_twice |= {by_approval.get(a, a) for a, n in pending.items() if n > 1}
        ledger = ledger_counts(self.ledger)
        return ChaosFigures(
            guarantee=self.options.guarantee,
            reader="read_committed" if self.exactly_once else "read_uncommitted",
            broker=self._broker_words(),
            calls=len(calls),
            duration_s=round(duration, 1),
            calls_without_terminal_reply=len(replies.without_terminal),
            approvals_asked_twice=len(asked_twice),
            approved_runs_twice=sum(1 for n in ledger.values() if n > 1),
            approved_outcome_unknown=replies.unknown_outcome,
            duplicate_replies=replies.duplicate_pending + replies.duplicate_terminal,
            duplicate_pending_replies=replies.duplicate_pending,
            duplicate_terminal_replies=replies.duplicate_terminal,
            unexpected_outcomes=replies.unexpected,
            final_lag=lag,
            worker_kills=self.kills,
            unplanned_worker_exits=len(self.pool.unplanned_exits),
            calls_in_the_dark=len(in_the_dark(changelog, self.reader.by_call)),
            worker_pauses=self.pauses,
            worker_partitions=self.net_partitions,
            table_disagreements=len(self.disagreements),
            runs_by_non_owner=len(self.non_owner_runs),
            disagreement_examples=self.disagreements[:10],
            non_owner_examples=self.non_owner_runs[:10],
            runs_after_own_revocation=len(self.revoked_runs),
            revoked_examples=self.revoked_runs[:10],
            producer_resends=resends,
            faults=self.faults,
            outcomes=replies.outcomes,
            missing_examples=replies.without_terminal[:10],
            duplicate_examples=duplicate_examples(
                calls, self.reader.by_call, self.reader.places, self.started_ms
            ),
            approved=approved_figures(calls, self.reader.by_call, ledger),
            killed=killed_figures(self.worker_kills, self.reader.by_call, ledger),
            kills=list(self.worker_kills),
        )

    def _broker_words(self) -> str:
        if isinstance(self.broker, ClusterControl):
            rf = self.settings.replication_factor
            return f"local cluster of {self.broker.nodes} nodes, replication {rf}"
        return "local, restarted" if self.broker.restartable else "given (not restarted)"


async def run_chaos(
    options: ChaosOptions, broker: BrokerControl | ClusterControl, workdir: Path
) -> ChaosFigures:
    """One chaos run against broker, its files under workdir."""
    return await ChaosRun(options, broker, workdir).run()
