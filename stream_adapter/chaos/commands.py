"""`stream-adapter chaos` and `stream-adapter fuzz`: run, print the figures, write them as JSON."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from .harness import BrokerControl
from .observe import quiet_kafka_logs

T = TypeVar("T")
console = Console()


async def _with_broker(
    bootstrap: str | None, home: Path, jars_dir: Path, work: Callable[[BrokerControl], Awaitable[T]]
) -> T:
    """Run work against the given bootstrap, or a fresh local broker under home (stopped after)."""
    if bootstrap:
        return await work(BrokerControl(bootstrap))
    with console.status("starting a local Kafka broker"):
        broker = await BrokerControl.start_local(home / "kafka", jars_dir)
    try:
        return await work(broker)
    finally:
        await broker.stop()


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    console.print(f"figures written to {path}")


_bootstrap = click.option(
    "--bootstrap",
    default=None,
    help="Use this broker instead of starting one (the broker restart is then skipped).",
)
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
    "--guarantee",
    type=click.Choice(["at_least_once", "exactly_once"]),
    default="at_least_once",
    show_default=True,
)
@click.option("--partitions", type=click.IntRange(1, 64), default=8, show_default=True)
@click.option("--session-timeout", type=click.FloatRange(1), default=10.0, show_default=True)
@click.option("--max-seconds", type=click.FloatRange(10), default=1800.0, show_default=True)
@click.option("--seed", type=int, default=None, help="Seed of the call mix and the faults.")
@click.option("--no-broker-restart", is_flag=True, help="Skip the broker kill and restart.")
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=Path("chaos-figures.json")
)
@_bootstrap
@_jars
@_workdir
def chaos(
    calls: int,
    rate: float,
    kills: int,
    guarantee: str,
    partitions: int,
    session_timeout: float,
    max_seconds: float,
    seed: int | None,
    no_broker_restart: bool,
    json_path: Path,
    bootstrap: str | None,
    jars_dir: Path,
    workdir: Path | None,
) -> None:
    """Calls under SIGKILLs, a broker restart and scaling; exit 1 unless nothing was lost."""
    from .report import render
    from .scenario import ChaosOptions, run_chaos

    quiet_kafka_logs()
    options = ChaosOptions(
        calls=calls,
        rate=rate,
        kills=kills,
        broker_restart=not no_broker_restart,
        guarantee=guarantee,
        partitions=partitions,
        session_timeout_s=session_timeout,
        max_seconds=max_seconds,
        seed=seed,
    )
    with _run_dir(workdir) as root:
        if bootstrap:
            console.print("[yellow]a given broker cannot be restarted: no broker restart[/yellow]")
        figures = asyncio.run(
            _with_broker(bootstrap, root, jars_dir, lambda b: run_chaos(options, b, root / "run"))
        )
    render(figures, console)
    _write_json(json_path, {"options": dataclasses.asdict(options), "figures": figures.to_json()})
    sys.exit(0 if figures.passed else 1)


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
@_bootstrap
@_jars
@_workdir
def fuzz(
    calls: int,
    decisions: int,
    seed: int,
    max_seconds: float,
    json_path: Path,
    bootstrap: str | None,
    jars_dir: Path,
    workdir: Path | None,
) -> None:
    """Malformed calls and decisions among valid ones; exit 1 unless each got its answer."""
    from .fuzz import FuzzOptions, render_fuzz, run_fuzz

    quiet_kafka_logs()
    options = FuzzOptions(calls=calls, decisions=decisions, seed=seed, max_seconds=max_seconds)
    with _run_dir(workdir) as root:
        figures = asyncio.run(
            _with_broker(bootstrap, root, jars_dir, lambda b: run_fuzz(options, b, root / "run"))
        )
    render_fuzz(figures, console)
    _write_json(json_path, {"options": dataclasses.asdict(options), "figures": figures.to_json()})
    sys.exit(0 if figures.passed else 1)


COMMANDS = [chaos, fuzz]
