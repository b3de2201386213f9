"""CLI commands: `call TOOL ARGS_JSON [--wait S]` and `dlq list|replay`."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from stream_adapter.errors import AdapterError
from stream_adapter.replies import Reply
from stream_adapter.settings import Settings

console = Console()
err_console = Console(stderr=True)

EXIT_ERROR_REPLY = 1
EXIT_NO_REPLY = 4
EXIT_STILL_PENDING = 3


def _fail(exc: AdapterError) -> None:
    err_console.print(f"[red]error[/red] ({exc.kind}): {exc.detail}", highlight=False)
    sys.exit(1)


def _print_reply(reply: Reply) -> None:
    click.echo(orjson.dumps(reply).decode())


@click.command("call")
@click.argument("tool")
@click.argument("arguments", metavar="ARGS_JSON", default="{}")
@click.option(
    "--wait",
    "wait_s",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait for the final reply (following pending_approval).",
)
@click.option("--run-id", default=None, help="Give the call this run_id (else derived).")
@click.option("--call-id", default=None, help="Give the call this call_id (else derived).")
@click.option("--key", default=None, help="Kafka key (default: the run_id when given).")
@click.pass_obj
def call(
    settings: Settings,
    tool: str,
    arguments: str,
    wait_s: float,
    run_id: str | None,
    call_id: str | None,
    key: str | None,
) -> None:
    """Produce one call of TOOL with ARGS_JSON and print each reply as a JSON line.

    Exit 0 on an ok or already_done reply, 1 on an error reply, 4 when no reply came within
    --wait, 3 when the call is still pending approval when --wait runs out.
    """
    from stream_adapter.ops.call import call as produce_call
    from stream_adapter.ops.call import envelope_for

    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="ARGS_JSON") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint="ARGS_JSON")
    try:
        body = envelope_for(tool, parsed, run_id, call_id)
        kafka_key = (key or run_id or "").encode() or None
        result = asyncio.run(
            produce_call(settings, body, wait_s=wait_s, key=kafka_key, on_reply=_print_reply)
        )
    except AdapterError as exc:
        _fail(exc)
    if not result.replies:
        err_console.print(f"no reply within {wait_s:g}s for {result.run_id}", highlight=False)
        sys.exit(EXIT_NO_REPLY)
    final = result.final
    if final is None:
        sys.exit(EXIT_STILL_PENDING)
    if final.get("status") == "error":
        sys.exit(EXIT_ERROR_REPLY)


@click.group()
def dlq() -> None:
    """Dead letters: list them, replay them as the same calls."""


@dlq.command("list")
@click.option("--filter", "kind", default=None, help="Only this error kind (e.g. ToolFailed).")
@click.option("--limit", type=int, default=None, help="At most this many (oldest first).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def dlq_list(settings: Settings, kind: str | None, limit: int | None, as_json: bool) -> None:
    """Show each dead letter's origin, error kind and time (never its payload)."""
    from stream_adapter.ops.dlq import read_letters

    try:
        letters = asyncio.run(read_letters(settings, kind=kind))
    except AdapterError as exc:
        _fail(exc)
    letters = letters[:limit] if limit is not None else letters
    if as_json:
        for letter in letters:
            click.echo(orjson.dumps(letter.summary()).decode())
        return
    table = Table("dlq", "message-id", "error-kind", "status", "attempts", "failed-at")
    for letter in letters:
        row: dict[str, Any] = letter.summary()
        table.add_row(
            f"{row['partition']}:{row['offset']}",
            row["message_id"],
            row["error_kind"],
            row["error_status"],
            row["attempts"],
            row["failed_at"],
        )
    console.print(table)
    console.print(f"{len(letters)} dead letter(s) in {settings.dlq_topic}")


@dlq.command("replay")
@click.option("--filter", "kind", default=None, help="Only letters of this error kind.")
@click.option("--limit", type=int, default=None, help="Replay at most this many.")
@click.pass_obj
def dlq_replay(settings: Settings, kind: str | None, limit: int | None) -> None:
    """Publish dead calls again to the calls topic with their original ids.

    Letters from other topics (decisions) and originals that are no valid envelope are
    skipped and counted. Every run replays every matching letter again: choose with
    --filter and --limit.
    """
    from stream_adapter.ops.dlq import read_letters, replay

    try:
        letters = asyncio.run(read_letters(settings, kind=kind))
    except AdapterError as exc:
        _fail(exc)
    total = len(letters) if limit is None else min(limit, len(letters))
    columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=err_console, transient=False) as progress:
        task = progress.add_task("replay", total=total)

        def step(_: Any, replayed: bool) -> None:
            if replayed:
                progress.advance(task)

        try:
            report = asyncio.run(replay(settings, letters, limit=limit, on_step=step))
        except AdapterError as exc:
            _fail(exc)
        progress.update(task, total=len(report.replayed))
    click.echo(f"replayed {len(report.replayed)} to {settings.calls_topic}")
    for reason, count in sorted(report.skipped.items()):
        click.echo(f"skipped {count}: {reason}")


COMMANDS = [call, dlq]
