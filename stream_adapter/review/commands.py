"""CLI commands: `review`, `reviewers add|list|remove`, `approvals list|decide`."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click
import orjson
from rich.console import Console
from rich.table import Table

from stream_adapter.approvals import ApprovalState
from stream_adapter.errors import AdapterError
from stream_adapter.review.auth import ReviewersFile
from stream_adapter.settings import Settings

console = Console()
err_console = Console(stderr=True)


def _fail(exc: AdapterError) -> None:
    err_console.print(f"[red]error[/red] ({exc.kind}): {exc.detail}", highlight=False)
    sys.exit(1)


@click.command()
@click.pass_obj
def review(settings: Settings) -> None:
    """Run the review web service (page and JSON API) until SIGTERM or Ctrl-C."""
    from stream_adapter.logs import configure_logging
    from stream_adapter.review.service import serve

    configure_logging(settings.log_level, settings.log_format)

    def ready(url: str) -> None:
        click.echo(f"review service listening on {url}", err=False)

    try:
        asyncio.run(serve(settings, ready))
    except AdapterError as exc:
        _fail(exc)


@click.group()
def reviewers() -> None:
    """The reviewers file (names and hashed tokens)."""


@reviewers.command("add")
@click.argument("name")
@click.option("--replace", is_flag=True, help="Give an existing reviewer a new token.")
@click.option("--token-only", is_flag=True, help="Print only the token (for scripts).")
@click.pass_obj
def reviewers_add(settings: Settings, name: str, replace: bool, token_only: bool) -> None:
    """Add reviewer NAME and print their token; it is shown only this once."""
    try:
        token = ReviewersFile(settings.reviewers_file).add(name, replace=replace)
    except AdapterError as exc:
        _fail(exc)
    if token_only:
        click.echo(token)
        return
    click.echo(f"reviewer {name} added to {settings.reviewers_file}; their token (shown once):")
    click.echo(token)


@reviewers.command("list")
@click.pass_obj
def reviewers_list(settings: Settings) -> None:
    """List reviewer names (never tokens)."""
    for reviewer in ReviewersFile(settings.reviewers_file).reviewers():
        click.echo(f"{reviewer.name}\t{reviewer.created_at}")


@reviewers.command("remove")
@click.argument("name")
@click.pass_obj
def reviewers_remove(settings: Settings, name: str) -> None:
    """Remove reviewer NAME: their token and sessions stop working at once."""
    if not ReviewersFile(settings.reviewers_file).remove(name):
        err_console.print(f"no reviewer {name!r}")
        sys.exit(1)


@click.group()
def approvals() -> None:
    """Approvals for operators: list them, approve or deny one."""


_STATES = click.Choice([s.value for s in ApprovalState])


@approvals.command("list")
@click.option("--state", type=_STATES, default=None, help="Only approvals in this state.")
@click.option("--json", "as_json", is_flag=True, help="One JSON record per line.")
@click.pass_obj
def approvals_list(settings: Settings, state: str | None, as_json: bool) -> None:
    """Approvals as the approvals topic has them now, oldest first."""
    from stream_adapter.review.view import record_json, snapshot

    try:
        view = asyncio.run(snapshot(settings))
    except AdapterError as exc:
        _fail(exc)
    records = view.select(ApprovalState(state) if state else None)
    if as_json:
        for record in records:
            click.echo(orjson.dumps(record_json(record)).decode())
        return
    table = Table("approval_id", "tool", "state", "reviewer", "requested_at", "run_id")
    for r in records:
        table.add_row(r.approval_id, r.tool, r.state, r.reviewer or "", r.requested_at, r.run_id)
    console.print(table)


async def _decide(settings: Settings, approval_id: str, **decision: Any) -> Any:
    from stream_adapter.review.decide import Decider, DecisionWriter
    from stream_adapter.review.view import ApprovalsView

    view = ApprovalsView(settings)
    writer = DecisionWriter(settings)
    await view.start()
    try:
        await view.wait_caught_up()
        await writer.start()
        return await Decider(view, writer).decide(approval_id, **decision)
    finally:
        await writer.stop()
        await view.stop()


@approvals.command("decide")
@click.argument("approval_id")
@click.option("--approve/--deny", "approved", default=None, help="The verdict (required).")
@click.option("--reviewer", required=True, help="Who decides (recorded on the approval).")
@click.option("--reason", default=None, help="Why (kept in the record, never logged).")
@click.option(
    "--wait",
    "wait_s",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds to wait for the worker to show the decision.",
)
@click.pass_obj
def approvals_decide(
    settings: Settings,
    approval_id: str,
    approved: bool | None,
    reviewer: str,
    reason: str | None,
    wait_s: float,
) -> None:
    """Approve or deny a pending approval (signed when decision keys are configured).

    Exit 1 when it is unknown or not pending (nothing is written then).
    """
    if approved is None:
        raise click.UsageError("say --approve or --deny")
    try:
        outcome = asyncio.run(
            _decide(
                settings,
                approval_id,
                approved=approved,
                reviewer=reviewer,
                reason=reason,
                wait_s=wait_s,
            )
        )
    except AdapterError as exc:
        _fail(exc)
    if outcome.record is None:
        console.print(f"decision sent for {approval_id}; the worker has not shown it yet")
    else:
        console.print(f"{approval_id}: {outcome.record.state} by {outcome.record.reviewer}")


COMMANDS = (review, reviewers, approvals)
