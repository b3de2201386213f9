"""CLI commands: `call TOOL [ARGS_JSON|-] [--wait S]` and `dlq list|replay`."""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import quote

import click
import orjson

from stream_adapter.commands import Column, ExitCode, emit, note, pass_settings, run_client
from stream_adapter.core.replies import Reply
from stream_adapter.settings import Settings


def review_url(settings: Settings) -> str:
    """Where a reviewer opens the review page (a wildcard bind address read as this host)."""
    host = settings.review_host
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.review_port}/"


def _arguments(text: str) -> dict[str, Any]:
    """ARGS_JSON (or stdin for `-`) as a JSON object; a usage error otherwise."""
    if text == "-":
        text = sys.stdin.read()
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="ARGS_JSON") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint="ARGS_JSON")
    return parsed


@click.command("call")
@click.argument("tool")
@click.argument("arguments", metavar="[ARGS_JSON|-]", default="{}")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, min_open=True),
    metavar="SECONDS",
    default=30.0,
    show_default=True,
    help="Seconds to wait for the final reply (following pending_approval).",
)
@click.option("--run-id", default=None, help="Give the call this run_id (else derived).")
@click.option("--call-id", default=None, help="Give the call this call_id (else derived).")
@click.option("--key", default=None, help="Kafka key (default: the run_id when given).")
@pass_settings
def call(
    settings: Settings,
    tool: str,
    arguments: str,
    wait_s: float,
    run_id: str | None,
    call_id: str | None,
    key: str | None,
) -> None:
    """Produce one call of TOOL and print each reply as a JSON line.

    ARGS_JSON is a JSON object; `-` reads it from stdin. While the call waits for a
    reviewer, stderr names its approval and the review page.

    Exit 0 on an ok or already_done reply, 1 on an error reply, 3 when the call is still
    pending approval when --wait runs out, 4 when no reply came within --wait.
    """
    from stream_adapter.kafka.connectivity import BrokerChange, describe
    from stream_adapter.ops.call import CallResult, envelope_for
    from stream_adapter.ops.call import call as produce_call

    body = envelope_for(tool, _arguments(arguments), run_id, call_id)
    kafka_key = (key or run_id or "").encode() or None

    def sent(result: CallResult) -> None:
        note(
            f"sent {result.message_id} (run_id {result.run_id}, call_id {result.call_id}); "
            f"waiting up to {wait_s:g}s for its reply"
        )

    def replied(reply: Reply) -> None:
        click.echo(orjson.dumps(reply).decode())
        if reply.get("status") == "pending_approval":
            approval = reply.get("approval_id", "")
            page = f"{review_url(settings)}approvals/{quote(approval, safe='')}"
            note(f"pending approval {approval}: decide at {page}")
            note(f"  or: stream-adapter approvals decide {approval} --approve --reviewer NAME")

    def broker(change: BrokerChange) -> None:
        note(describe(change))

    result = run_client(
        produce_call(
            settings,
            body,
            wait_s=wait_s,
            key=kafka_key,
            on_sent=sent,
            on_reply=replied,
            on_broker=broker,
        )
    )
    if not result.replies:
        note(f"no reply within {wait_s:g}s for {result.run_id} (is a worker running?)")
        raise click.exceptions.Exit(int(ExitCode.NO_REPLY))
    final = result.final
    if final is None:
        note(f"still pending approval after {wait_s:g}s")
        raise click.exceptions.Exit(int(ExitCode.PENDING))
    if final.get("status") == "error":
        raise click.exceptions.Exit(int(ExitCode.FAILED))


@click.group()
def dlq() -> None:
    """Dead letters: list them, replay them as the same calls."""


DLQ_COLUMNS = (
    Column("partition"),
    Column("offset"),
    Column("message_id", whole=True),
    Column("error_kind"),
    Column("error_status"),
    Column("attempts"),
    Column("failed_at", whole=True),
)


@dlq.command("list")
@click.option("--filter", "kind", default=None, help="Only this error kind (e.g. ToolFailed).")
@click.option(
    "--limit", type=click.IntRange(0), default=None, help="At most this many (oldest first)."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_settings
def dlq_list(settings: Settings, kind: str | None, limit: int | None, as_json: bool) -> None:
    """Show each dead letter's origin, error kind and time (never its payload)."""
    from stream_adapter.ops.dlq import read_letters

    letters = run_client(read_letters(settings, kind=kind))
    letters = letters[:limit] if limit is not None else letters
    emit([letter.summary() for letter in letters], DLQ_COLUMNS, as_json=as_json)
    note(f"{len(letters)} dead letter(s) in {settings.dlq_topic}")


@dlq.command("replay")
@click.option("--filter", "kind", default=None, help="Only letters of this error kind.")
@click.option("--limit", type=click.IntRange(0), default=None, help="Replay at most this many.")
@pass_settings
def dlq_replay(settings: Settings, kind: str | None, limit: int | None) -> None:
    """Publish dead calls again to the calls topic with their original ids.

    Letters from other topics (decisions) and originals that are no valid envelope are
    skipped and counted. Every run replays every matching letter again: choose with
    --filter and --limit. Progress shows on stderr; the summary ends the output.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from stream_adapter.ops.dlq import read_letters, replay

    letters = run_client(read_letters(settings, kind=kind))
    columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("replay", total=len(letters))

        def step(_: Any, replayed: bool) -> None:
            progress.advance(task)

        report = run_client(replay(settings, letters, limit=limit, on_step=step))
    skipped = sum(report.skipped.values())
    click.echo(
        f"replayed {len(report.replayed)} of {len(letters)} dead letter(s) to "
        f"{settings.calls_topic}; skipped {skipped}"
    )
    for reason, count in sorted(report.skipped.items()):
        click.echo(f"skipped {count}: {reason}")


@click.command("acls")
@click.option("--agents", default="User:agents", show_default=True, help="Agents' principal.")
@click.option("--adapter", default="User:adapter", show_default=True, help="Worker's principal.")
@click.option("--review", default="User:review", show_default=True, help="Review's principal.")
@pass_settings
def acls(settings: Settings, agents: str, adapter: str, review: str) -> None:
    """Print the least-privilege ACLs of this deployment as `kafka-acls.sh` commands.

    $ADMIN stands for `--bootstrap-server HOST:PORT --command-config admin.properties`.
    """
    from stream_adapter.ops.acls import Principals, commands

    for line in commands(settings, Principals(agents, adapter, review)):
        click.echo(line)
