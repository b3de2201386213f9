"""`stream-adapter chaos` and `stream-adapter fuzz`: run with progress on stderr, print the
figures and a summary, write the figures as JSON.

Both start a broker of their own (the chaos run kills and restarts it; `chaos --brokers 3` a
three-node cluster whose nodes it kills and restarts) unless `--broker` (or its environment
variable) names one, which is then used as it is and never restarted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from stream_adapter.commands import ExitCode, note, source_of
from stream_adapter_dev.progress import live_status

if TYPE_CHECKING:
    from .cluster_faults import ClusterControl
    from .fuzz import FuzzRun
    from .harness import BrokerControl
    from .scenario import ChaosRun

T = TypeVar("T")


def _given_broker(ctx: click.Context) -> str | None:
    """The broker --broker (or its environment variable) names; None: start one."""
    source = source_of(ctx)
    return source.settings().bootstrap_servers if source.is_given("broker") else None


async def _with_broker(
    bootstrap: str | None,
    home: Path,
    jars_dir: Path,
    work: Callable[[BrokerControl | ClusterControl], Awaitable[T]],
    brokers: int = 1,
) -> T:
    """Run work against the given bootstrap, or a fresh local broker or cluster under home
    (stopped after)."""
    from .cluster_faults import ClusterControl
    from .harness import BrokerControl

    if bootstrap:
        note(f"using the broker at {bootstrap} (it is not restarted)")
        return await work(BrokerControl(bootstrap))
    broker: BrokerControl | ClusterControl
    if brokers > 1:
        note(f"starting a local Kafka cluster of {brokers} nodes")
        broker = await ClusterControl.start_local(home / "kafka", jars_dir, brokers)
    else:
        note("starting a local Kafka broker")
        broker = await BrokerControl.start_local(home / "kafka", jars_dir)
    note(f"local broker on {broker.bootstrap}")
    try:
        return await work(broker)
    finally:
        await broker.stop()


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


async def _chaos_with_progress(run: ChaosRun) -> Any:
    from .scenario import broker_faults

    scaling = 2 if run.options.scale else 0
    planned = (
        run.options.kills
        + len(run.options.running_kills)
        + run.options.pauses
        + len(run.options.running_pauses)
        + run.net_partitions_planned
        + (len(run.options.running_net_partitions) if run.proxies else 0)
        + scaling
        + len(broker_faults(run.options, run.broker.restartable))
    )

    def describe(elapsed_s: float) -> str:
        return (
            f"chaos: {run.sent}/{run.options.calls} calls sent, {run.reader.count} replies, "
            f"{len(run.faults)}/{planned} faults, {elapsed_s:.0f} s"
        )

    async with live_status(describe):
        return await run.run()


async def _fuzz_with_progress(run: FuzzRun) -> Any:
    def describe(elapsed_s: float) -> str:
        return f"fuzz: {run.reader.count} replies read, {elapsed_s:.0f} s"

    async with live_status(describe):
        return await run.run()


_jars = click.option(
    "--jars-dir",
    type=click.Path(path_type=Path),
    default=Path(".kafka/libs"),
    show_default=True,
    help="Where the local broker's jars are cached.",
)
_workdir = click.option(
    "--workdir",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the run's files (worker logs, ledger, broker data) here; default: a temp dir.",
)


@click.command()
@click.option("--calls", type=click.IntRange(1, 1_000_000), default=5000, show_default=True)
@click.option("--rate", type=click.FloatRange(1), default=40.0, show_default=True, help="Calls/s.")
@click.option("--kills", type=click.IntRange(0, 50), default=3, show_default=True)
@click.option(
    "--kill-while-running/--no-kill-while-running",
    default=True,
    show_default=True,
    help="Per approved tool (send_invoice, wire_funds), one SIGKILL of the worker running one "
    "of its calls, besides --kills.",
)
@click.option(
    "--pauses",
    type=click.IntRange(0, 20),
    default=1,
    show_default=True,
    help="SIGSTOPs of a random worker past the session timeout (then SIGCONT).",
)
@click.option(
    "--pause-while-running/--no-pause-while-running",
    default=True,
    show_default=True,
    help="Two SIGSTOPs past the session timeout of the worker running a wire_funds call: one "
    "before its effect, one after.",
)
@click.option(
    "--net-partitions",
    type=click.IntRange(0, 20),
    default=1,
    show_default=True,
    help="Network partitions of a random worker from the broker past the session timeout "
    "(a broker the run starts only).",
)
@click.option(
    "--partition-while-running/--no-partition-while-running",
    default=True,
    show_default=True,
    help="Two network partitions past the session timeout of the worker running a wire_funds "
    "call: one before its effect, one after (a broker the run starts only).",
)
@click.option(
    "--tool-latency",
    "tool_latency_s",
    type=click.FloatRange(0),
    default=0.4,
    show_default=True,
    help="Seconds the demo's approved tools take (their external API), the window a kill "
    "while one runs hits.",
)
@click.option(
    "--guarantee",
    type=click.Choice(["at_least_once", "exactly_once"]),
    default="at_least_once",
    show_default=True,
)
@click.option("--partitions", type=click.IntRange(1, 64), default=8, show_default=True)
@click.option("--session-timeout", type=click.FloatRange(1), default=10.0, show_default=True)
@click.option("--max-seconds", type=click.FloatRange(10), default=1800.0, show_default=True)
@click.option("--seed", type=int, default=None, help="Seed of the call mix and the faults.")
@click.option("--no-broker-restart", is_flag=True, help="Skip the broker faults.")
@click.option(
    "--brokers",
    type=click.Choice(["1", "3"]),
    default="1",
    show_default=True,
    help="3: a local three-node cluster (replication 3, min ISR 2) whose faults replace the "
    "broker restart: the busiest leader SIGKILLed, a rolling restart, and (exactly once) the "
    "transaction coordinator SIGKILLed.",
)
@click.option(
    "--steady-load/--no-steady-load",
    default=None,
    help="Keep sending calls past --calls until the last fault has recovered, so each fault "
    "happens under load [default: on with --brokers 3].",
)
@click.option(
    "--node-down",
    "node_down_s",
    type=click.FloatRange(0),
    default=15.0,
    show_default=True,
    help="Seconds a SIGKILLed node of the cluster stays down.",
)
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=Path("chaos-figures.json")
)
@_jars
@_workdir
@click.pass_context
def chaos(
    ctx: click.Context,
    calls: int,
    rate: float,
    kills: int,
    kill_while_running: bool,
    pauses: int,
    pause_while_running: bool,
    net_partitions: int,
    partition_while_running: bool,
    tool_latency_s: float,
    guarantee: str,
    partitions: int,
    session_timeout: float,
    max_seconds: float,
    seed: int | None,
    no_broker_restart: bool,
    brokers: str,
    steady_load: bool | None,
    node_down_s: float,
    json_path: Path,
    jars_dir: Path,
    workdir: Path | None,
) -> None:
    """Calls under SIGKILLs, broker faults and scaling; exit 1 unless nothing was lost.

    Also pauses and network partitions of a worker past the session timeout."""
    from rich.console import Console

    from stream_adapter.core import logs

    from .load import APPROVED
    from .observe import quiet_kafka_logs
    from .report import render
    from .scenario import (
        AFTER,
        BEFORE,
        KILL_RUNNING,
        PARTITION,
        PARTITION_RUNNING,
        PAUSE,
        PAUSE_RUNNING,
        ChaosOptions,
        ChaosRun,
    )

    wire_both = (f"wire_funds/{BEFORE}", f"wire_funds/{AFTER}")

    logs.configure_logging("INFO")  # the faults and resends as they happen, with their fields
    quiet_kafka_logs()
    bootstrap = _given_broker(ctx)
    options = ChaosOptions(
        calls=calls,
        rate=rate,
        kills=kills,
        running_kills=tuple(APPROVED) if kill_while_running else (),
        pauses=pauses,
        running_pauses=wire_both if pause_while_running else (),
        net_partitions=net_partitions,
        running_net_partitions=wire_both if partition_while_running else (),
        tool_latency_s=tool_latency_s,
        broker_restart=not no_broker_restart,
        guarantee=guarantee,
        partitions=partitions,
        session_timeout_s=session_timeout,
        max_seconds=max_seconds,
        seed=seed,
        brokers=int(brokers),
        node_down_s=node_down_s,
        steady_load=steady_load if steady_load is not None else brokers == "3",
    )
    with _run_dir(workdir) as root:
        if bootstrap and not no_broker_restart:
            note("a given broker cannot be restarted: the run skips the broker faults")
        if (bootstrap or brokers == "3") and (net_partitions or partition_while_running):
            note("network partitions need the slots' listeners of a broker the run starts: skipped")
        figures = asyncio.run(
            _with_broker(
                bootstrap,
                root,
                jars_dir,
                lambda b: _chaos_with_progress(ChaosRun(options, b, root / "run")),
                options.brokers,
            )
        )
    render(figures, Console())
    _write_json(json_path, {"options": dataclasses.asdict(options), "figures": figures.to_json()})
    worker_faults = {"worker SIGKILL", "scale-up 1->2", "scale-down 2->1"}
    worker_faults |= set(KILL_RUNNING) | set(PAUSE_RUNNING) | set(PARTITION_RUNNING)
    worker_faults |= {PAUSE, PARTITION}
    restarts = sum(1 for f in figures.faults if f.kind not in worker_faults)
    landed = ", ".join(f"{name} {k.kills_landed}" for name, k in figures.killed.items())
    click.echo(
        f"chaos {'PASSED' if figures.passed else 'FAILED'} ({figures.guarantee}): "
        f"{figures.calls} calls in {figures.duration_s:.0f} s, {figures.worker_kills} worker "
        f"kill(s) (landed on a running approved call: {landed}; planned ones that found none: "
        f"{figures.planned_running_kills_missed}), {restarts} broker fault(s); "
        f"{figures.calls_without_terminal_reply} without "
        f"a final reply, {figures.approved_runs_twice} approved run twice, "
        f"{figures.idempotent_unknown} idempotent approved unknown, "
        f"{figures.calls_in_the_dark} in the dark, {figures.table_disagreements} table/changelog "
        f"disagreement(s), {figures.runs_by_non_owner} run(s) by a non-owner, "
        f"{figures.worker_pauses} pause(s), {figures.worker_partitions} partition(s), final lag "
        f"{figures.final_lag}, longest time without a reply {figures.longest_reply_gap_s:.1f} s; "
        f"figures in {json_path}"
    )
    raise click.exceptions.Exit(int(ExitCode.OK if figures.passed else ExitCode.FAILED))


class _run_dir:
    """The given folder, or a temp folder removed afterwards."""

    def __init__(self, given: Path | None) -> None:
        self._given = given
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Path:
        if self._given is not None:
            self._given.mkdir(parents=True, exist_ok=True)
            return self._given.resolve()
        self._tmp = tempfile.TemporaryDirectory(prefix="stream-adapter-chaos-")
        return Path(self._tmp.name)

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


@click.command()
@click.option("--calls", type=click.IntRange(1, 1_000_000), default=10_000, show_default=True)
@click.option("--decisions", type=click.IntRange(1, 1_000_000), default=1_000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-seconds", type=click.FloatRange(10), default=1200.0, show_default=True)
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=Path("fuzz-figures.json")
)
@click.option(
    "--hostile",
    is_flag=True,
    help="What a careless or hostile agent sends instead: sizes around every limit, reused "
    "ids, re-keyed and replayed decisions, floods of identical calls (--calls and "
    "--decisions do not apply).",
)
@click.option(
    "--guarantee",
    type=click.Choice(["at_least_once", "exactly_once", "both"]),
    default="both",
    show_default=True,
    help="With --hostile: the worker's processing guarantee (both: one run of each).",
)
@_jars
@_workdir
@click.pass_context
def fuzz(
    ctx: click.Context,
    calls: int,
    decisions: int,
    seed: int,
    max_seconds: float,
    json_path: Path,
    hostile: bool,
    guarantee: str,
    jars_dir: Path,
    workdir: Path | None,
) -> None:
    """Malformed calls and decisions among valid ones; exit 1 unless each got its answer.

    With --hostile, a hostile agent's messages instead; exit 1 unless every counter is 0.
    """
    from rich.console import Console

    from .fuzz import FuzzOptions, FuzzRun, render_fuzz
    from .observe import quiet_kafka_logs

    quiet_kafka_logs()
    bootstrap = _given_broker(ctx)
    if hostile:
        _hostile(bootstrap, guarantee, seed, max_seconds, json_path, jars_dir, workdir)
        return
    options = FuzzOptions(calls=calls, decisions=decisions, seed=seed, max_seconds=max_seconds)
    with _run_dir(workdir) as root:
        figures = asyncio.run(
            _with_broker(
                bootstrap,
                root,
                jars_dir,
                lambda b: _fuzz_with_progress(FuzzRun(options, b, root / "run")),
            )
        )
    render_fuzz(figures, Console())
    _write_json(json_path, {"options": dataclasses.asdict(options), "figures": figures.to_json()})
    click.echo(
        f"fuzz {'PASSED' if figures.passed else 'FAILED'}: {figures.malformed_calls} malformed "
        f"calls, {figures.malformed_decisions} malformed decisions, {figures.valid_calls} valid "
        f"calls in {figures.duration_s:.0f} s; {figures.calls_without_one_error_reply} without "
        f"one error reply, {figures.valid_calls_without_reply} valid without a reply, "
        f"{figures.worker_restarts} worker restart(s); figures in {json_path}"
    )
    raise click.exceptions.Exit(int(ExitCode.OK if figures.passed else ExitCode.FAILED))


def _hostile(
    bootstrap: str | None,
    guarantee: str,
    seed: int,
    max_seconds: float,
    json_path: Path,
    jars_dir: Path,
    workdir: Path | None,
) -> None:
    """`fuzz --hostile`: one hostile run per guarantee asked for, against one broker."""
    from rich.console import Console

    from .hostile import HostileFigures, HostileOptions, HostileRun, render_hostile

    guarantees = ["at_least_once", "exactly_once"] if guarantee == "both" else [guarantee]

    async def runs(broker: BrokerControl | ClusterControl) -> list[HostileFigures]:
        out = []
        for i, one in enumerate(guarantees):
            options = HostileOptions(guarantee=one, seed=seed, max_seconds=max_seconds)
            run = HostileRun(options, broker, root / f"run-{i}")

            def describe(elapsed_s: float, run: HostileRun = run, one: str = one) -> str:
                count = run.reader.count
                return (
                    f"hostile fuzz ({one}): {count} replies read, {run.waiting}, {elapsed_s:.0f} s"
                )

            async with live_status(describe):
                out.append(await run.run())
        return out

    with _run_dir(workdir) as root:
        all_figures = asyncio.run(_with_broker(bootstrap, root, jars_dir, runs))
    console = Console()
    for figures in all_figures:
        render_hostile(figures, console)
    passed = all(f.passed for f in all_figures)
    _write_json(json_path, {"hostile": [f.to_json() for f in all_figures], "passed": passed})
    for f in all_figures:
        click.echo(
            f"hostile fuzz ({f.guarantee}) {'PASSED' if f.passed else 'FAILED'}: "
            f"{f.messages} messages in {f.duration_s:.0f} s; {f.stalls} stalls, "
            f"{f.lost_calls} lost calls, {f.wrong_answers} wrong answers, "
            f"{f.records_changed} records changed, {f.worker_restarts} worker restart(s), "
            f"final lag {f.final_lag}; figures in {json_path}"
        )
    raise click.exceptions.Exit(int(ExitCode.OK if passed else ExitCode.FAILED))


COMMANDS = [chaos, fuzz]
