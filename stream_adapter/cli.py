"""The `stream-adapter` command: a local broker, topics, the worker, and operator tools.

Every setting (SPEC §12) is also a global option, generated from `Settings`, so the names are
defined once: `stream-adapter --app-id demo --partitions 4 worker`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from stream_adapter.bench.command import bench as bench_command
from stream_adapter.chaos.commands import COMMANDS as CHAOS_COMMANDS
from stream_adapter.errors import AdapterError
from stream_adapter.ops.commands import COMMANDS as OPS_COMMANDS
from stream_adapter.review.commands import COMMANDS as REVIEW_COMMANDS
from stream_adapter.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])
console = Console(stderr=False)
err_console = Console(stderr=True)


def _settings_options(func: F) -> F:
    """Add one `--option` per Settings field; unset options leave the environment's value."""
    for name, info in reversed(Settings.model_fields.items()):
        flag = "--" + name.replace("_", "-")
        func = click.option(
            flag, name, default=None, show_default=False, help=info.description or f"({name})"
        )(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@_settings_options
@click.pass_context
def cli(ctx: click.Context, /, **options: Any) -> None:
    """Run AI-agent tool calls from Kafka."""
    changes = {key: value for key, value in options.items() if value is not None}
    try:
        ctx.obj = Settings().with_changes(**changes) if changes else Settings()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def _fail(exc: AdapterError) -> None:
    err_console.print(f"[red]error[/red] ({exc.kind}): {exc.detail}", highlight=False)
    sys.exit(1)


# -- kafka ------------------------------------------------------------------------------------


@cli.group()
def kafka() -> None:
    """A local single-node Apache Kafka (KRaft) for development and tests."""


def _broker_options(func: F) -> F:
    func = click.option(
        "--home",
        type=click.Path(path_type=Path),
        default=Path(".kafka"),
        show_default=True,
        help="Folder for jars, data and logs.",
    )(func)
    func = click.option(
        "--jars-dir",
        type=click.Path(path_type=Path),
        default=None,
        help="Where the jars are cached (default: HOME/libs).",
    )(func)
    func = click.option("--port", type=int, default=9092, show_default=True)(func)
    return click.option("--heap-mb", type=int, default=768, show_default=True)(func)


def _broker_config(home: Path, port: int, heap_mb: int, jars_dir: Path | None) -> Any:
    from stream_adapter.broker import local

    return local.BrokerConfig(home=home, port=port, heap_mb=heap_mb, jars_dir=jars_dir)


@kafka.command("start")
@_broker_options
def kafka_start(home: Path, port: int, heap_mb: int, jars_dir: Path | None) -> None:
    """Start the broker (fetching jars and formatting storage on first use)."""
    from stream_adapter.broker import local

    config = _broker_config(home, port, heap_mb, jars_dir)
    try:
        with console.status(f"starting Kafka {local.KAFKA_VERSION} on {config.bootstrap}"):
            bootstrap = local.start(config)
    except AdapterError as exc:
        _fail(exc)
    console.print(bootstrap)


@kafka.command("stop")
@_broker_options
@click.option("--kill", is_flag=True, help="SIGKILL instead of a clean stop.")
def kafka_stop(home: Path, port: int, heap_mb: int, jars_dir: Path | None, kill: bool) -> None:
    """Stop the broker; its data stays for the next start."""
    from stream_adapter.broker import local

    stopped = local.stop(_broker_config(home, port, heap_mb, jars_dir), kill=kill)
    console.print("stopped" if stopped else "not running")


@kafka.command("status")
@_broker_options
def kafka_status(home: Path, port: int, heap_mb: int, jars_dir: Path | None) -> None:
    """Say whether the broker runs and answers; exit 1 when it does not."""
    from stream_adapter.broker import local

    state = local.status(_broker_config(home, port, heap_mb, jars_dir))
    if state.running:
        word = "answers" if state.answers else "does not answer"
        console.print(f"running (pid {state.pid}) on {state.bootstrap}, {word}")
    else:
        console.print("not running")
    sys.exit(0 if state.answers else 1)


# -- topics -----------------------------------------------------------------------------------


@cli.group()
def topics() -> None:
    """The topology's topics."""


def _print_topics(states: list[Any]) -> bool:
    table = Table("topic", "role", "partitions", "config", "state")
    clean = True
    for state in states:
        drift = state.drift
        clean = clean and not drift
        word = "created" if state.created else ("ok" if not drift else "; ".join(drift))
        style = "green" if not drift else "yellow"
        table.add_row(
            state.spec.name,
            state.spec.role,
            str(state.partitions if state.partitions is not None else "-"),
            ", ".join(f"{k}={v}" for k, v in state.spec.config.items()),
            f"[{style}]{word}[/{style}]",
        )
    console.print(table)
    return clean


def _topics_or_exit(states_of: Callable[[Settings], Any], settings: Settings) -> None:
    """Run a topics coroutine, print its table; exit 1 on a broker error, 2 on drift."""
    try:
        states = asyncio.run(states_of(settings))
    except AdapterError as exc:
        _fail(exc)
    if not _print_topics(states):
        sys.exit(2)


@topics.command("create")
@click.pass_obj
def topics_create(settings: Settings) -> None:
    """Create missing topics (idempotent); exit 2 when an existing one has drifted."""
    from stream_adapter.stream.topics import create_topics

    _topics_or_exit(create_topics, settings)


@topics.command("describe")
@click.pass_obj
def topics_describe(settings: Settings) -> None:
    """Show the topics as the broker has them; exit 2 on drift or a missing topic."""
    from stream_adapter.stream.topics import describe_topics

    _topics_or_exit(describe_topics, settings)


# -- worker -----------------------------------------------------------------------------------


@cli.command()
@click.pass_obj
def worker(settings: Settings) -> None:
    """Run the Faust worker of the configured topology until SIGTERM or Ctrl-C."""
    from stream_adapter.stream.worker import run_worker

    try:
        run_worker(settings)
    except AdapterError as exc:
        _fail(exc)


for _command in CHAOS_COMMANDS:  # chaos, fuzz (stream_adapter/chaos/)
    cli.add_command(_command)
for _command in REVIEW_COMMANDS:  # review, reviewers, approvals (stream_adapter/review/)
    cli.add_command(_command)
for _command in OPS_COMMANDS:  # call, dlq (stream_adapter/ops/)
    cli.add_command(_command)
cli.add_command(bench_command)  # stream_adapter/bench/


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="stream-adapter")
