"""CLI commands: `review`, `reviewers add|list|remove`, `approvals list|decide|resolve`."""

from __future__ import annotations

import asyncio
from typing import Any

import click
import orjson

from stream_adapter.commands import Column, NotPending, emit, note, pass_settings, run_client
from stream_adapter.core.approvals import ApprovalState
from stream_adapter.review.auth import ReviewersFile
from stream_adapter.settings import Settings


@click.command()
@pass_settings
def review(settings: Settings) -> None:
    """Run the review web service (page and JSON API) until SIGTERM or Ctrl-C."""
    from stream_adapter.core.logs import configure_logging
    from stream_adapter.review.service import serve

    configure_logging(settings.log_level, settings.log_format)

    def ready(url: str) -> None:
        click.echo(f"review service listening on {url}", err=False)

    asyncio.run(serve(settings, ready))


@click.group()
def reviewers() -> None:
    """The reviewers file (names and hashed tokens)."""


@reviewers.command("add")
@click.argument("name")
@click.option("--replace", is_flag=True, help="Give an existing reviewer a new token.")
@click.option("--token-only", is_flag=True, help="Print only the token (for scripts).")
@click.option(
    "--role",
    "roles",
    multiple=True,
    help="A role the reviewer has (REVIEW_TOOL_ROLES names the tools that need one).",
)
@click.option(
    "--caller",
    "callers",
    multiple=True,
    help="A caller name (of the callers file) this person also holds: never their reviewer.",
)
@pass_settings
def reviewers_add(
    settings: Settings,
    name: str,
    replace: bool,
    token_only: bool,
    roles: tuple[str, ...],
    callers: tuple[str, ...],
) -> None:
    """Add reviewer NAME and print their token; it is shown only this once."""
    token = ReviewersFile(settings.reviewers_file).add(
        name, replace=replace, roles=roles, callers=callers
    )
    if token_only:
        click.echo(token)
        return
    click.echo(f"reviewer {name} added to {settings.reviewers_file}; their token (shown once):")
    click.echo(token)


_json_option = click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")


@reviewers.command("list")
@_json_option
@pass_settings
def reviewers_list(settings: Settings, as_json: bool) -> None:
    """List reviewer names (never tokens)."""
    rows = [
        {"name": r.name, "roles": ",".join(r.roles), "created_at": r.created_at}
        for r in ReviewersFile(settings.reviewers_file).reviewers()
    ]
    columns = (Column("name", whole=True), Column("roles"), Column("created_at", whole=True))
    emit(rows, columns, as_json=as_json)
    note(f"{len(rows)} reviewer(s) in {settings.reviewers_file}")


@reviewers.command("remove")
@click.argument("name")
@pass_settings
def reviewers_remove(settings: Settings, name: str) -> None:
    """Remove reviewer NAME: their token and sessions stop working at once.

    Exit 5 when there is no such reviewer.
    """
    if not ReviewersFile(settings.reviewers_file).remove(name):
        raise NotPending(f"no reviewer {name!r} in {settings.reviewers_file}")
    click.echo(f"reviewer {name} removed")


@click.group()
def approvals() -> None:
    """Approvals for operators: list them, approve or deny one, resolve an unknown outcome."""


_STATES = click.Choice([s.value for s in ApprovalState])
APPROVAL_COLUMNS = (
    Column("approval_id", whole=True),
    Column("tool", whole=True),
    Column("state"),
    Column("reviewer"),
    Column("requested_at", whole=True),
    Column("run_id", whole=True),
)


@approvals.command("list")
@click.option("--state", type=_STATES, default=None, help="Only approvals in this state.")
@_json_option
@pass_settings
def approvals_list(settings: Settings, state: str | None, as_json: bool) -> None:
    """Approvals as the approvals topic has them now, oldest first."""
    from stream_adapter.review.view import record_json, snapshot

    view = run_client(snapshot(settings))
    records = view.select(ApprovalState(state) if state else None)
    emit([record_json(r) for r in records], APPROVAL_COLUMNS, as_json=as_json)
    note(f"{len(records)} approval(s){f' {state}' if state else ''} in {settings.approvals_topic}")


@approvals.command("show")
@click.argument("approval_id")
@pass_settings
def approvals_show(settings: Settings, approval_id: str) -> None:
    """One approval as the approvals topic has it now, every field as JSON: for a run, when
    and where it started and when it is surely over (`run_deadline`)."""
    from stream_adapter.core.errors import ApprovalNotFound
    from stream_adapter.review.view import record_json, snapshot

    record = run_client(snapshot(settings)).get(approval_id)
    if record is None:
        raise ApprovalNotFound("no such approval", approval_id=approval_id)
    click.echo(orjson.dumps(record_json(record), option=orjson.OPT_INDENT_2).decode())


async def _decide(
    settings: Settings, approval_id: str, *, resolve: bool = False, **decision: Any
) -> Any:
    from stream_adapter.review.decide import Decider, DecisionWriter
    from stream_adapter.review.view import ApprovalsView

    view = ApprovalsView(settings)
    writer = DecisionWriter(settings)
    await view.start()
    try:
        await view.wait_caught_up()
        await writer.start()
        decider = Decider(view, writer)
        if resolve:
            return await decider.resolve(approval_id, **decision)
        return await decider.decide(approval_id, **decision)
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
    type=click.FloatRange(0),
    metavar="SECONDS",
    default=10.0,
    show_default=True,
    help="Seconds to wait for the worker to show the decision.",
)
@pass_settings
def approvals_decide(
    settings: Settings,
    approval_id: str,
    approved: bool | None,
    reviewer: str,
    reason: str | None,
    wait_s: float,
) -> None:
    """Approve or deny a pending approval (signed when decision keys are configured).

    Exit 5 when it is unknown or not pending (nothing is written then).
    """
    if approved is None:
        raise click.UsageError("say --approve or --deny")
    outcome = run_client(
        _decide(
            settings,
            approval_id,
            approved=approved,
            reviewer=reviewer,
            reason=reason,
            wait_s=wait_s,
        )
    )
    if outcome.record is None:
        click.echo(f"decision sent for {approval_id}; the worker has not shown it yet")
    else:
        click.echo(f"{approval_id}: {outcome.record.state} by {outcome.record.reviewer}")


@approvals.command("resolve")
@click.argument("approval_id")
@click.option(
    "--ran/--not-run",
    "ran",
    default=None,
    help="It ran (settles it) or it did not run (runs it again, once). Required.",
)
@click.option(
    "--result",
    "result_json",
    default=None,
    metavar="JSON",
    help="With --ran: the call's result as JSON, for the agent's ok reply (default null).",
)
@click.option("--reviewer", required=True, help="Who resolves it (recorded on the approval).")
@click.option("--reason", default=None, help="Why (kept in the record, never logged).")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0),
    metavar="SECONDS",
    default=10.0,
    show_default=True,
    help="Seconds to wait for the worker to show the resolution.",
)
@pass_settings
def approvals_resolve(
    settings: Settings,
    approval_id: str,
    ran: bool | None,
    result_json: str | None,
    reviewer: str,
    reason: str | None,
    wait_s: float,
) -> None:
    """Resolve an approved call whose outcome is unknown (signed like decisions).

    The agent receives an ok reply with --result (--ran), or the reply of one fresh run
    (--not-run). Exit 5 when it is unknown to the table or its outcome is not unknown.
    """
    if ran is None:
        raise click.UsageError("say --ran or --not-run")
    if result_json is not None and not ran:
        raise click.UsageError("--result goes with --ran")
    try:
        result = None if result_json is None else orjson.loads(result_json)
    except orjson.JSONDecodeError:
        raise click.BadParameter("not JSON", param_hint="--result") from None
    outcome = run_client(
        _decide(
            settings,
            approval_id,
            resolve=True,
            ran=ran,
            result=result,
            reviewer=reviewer,
            reason=reason,
            wait_s=wait_s,
        )
    )
    if outcome.record is None:
        click.echo(f"resolution sent for {approval_id}; the worker has not shown it yet")
    else:
        said = "it ran" if ran else "it did not run"
        click.echo(
            f"{approval_id}: {said}, by {outcome.record.resolved_by}; now {outcome.record.state}"
        )


COMMANDS = (review, reviewers, approvals)
