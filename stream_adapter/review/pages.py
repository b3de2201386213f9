"""Server-rendered HTML (Jinja2, autoescaped): the login form, the approvals board, one approval.

Plain forms work without JavaScript; a small script long-polls `/live` and swaps the live part
in, keeping a half-typed reason and the focus. Style and script are inlined under the response's
CSP nonce. What a template shows is prepared here as plain data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from stream_adapter.core.approvals import ApprovalRecord, ApprovalState, instant
from stream_adapter.review.catalog import Catalog, ToolInfo, unit_of
from stream_adapter.review.listing import NO_TWINS, Page, Twins, page_of
from stream_adapter.review.view import Seen

__all__ = [
    "NOTICES",
    "approval_page",
    "approval_path",
    "board_fragment",
    "decision_path",
    "detail_fragment",
    "dom_id",
    "login_page",
    "main_page",
    "missing_page",
    "resolution_path",
]

NOTICES = {
    "approved": "Approved: the call runs now.",
    "denied": "Denied: the caller gets an ApprovalDenied reply.",
    "sent": "Decision sent; the worker has not shown it yet.",
    "ran": "Resolved: it ran. The caller gets an ok reply with the result given.",
    "not_run": "Resolved: it did not run. It runs once more now, as a fresh approved run.",
    "resolution_sent": "Resolution sent; the worker has not shown it yet.",
}


def dom_id(approval_id: str) -> str:
    """A safe, stable element id for an approval."""
    return "a-" + hashlib.blake2b(approval_id.encode(), digest_size=6).hexdigest()


def approval_path(approval_id: str) -> str:
    """The approval's own page: a stable link to share."""
    return f"/approvals/{quote(approval_id, safe='')}"


def decision_path(approval_id: str) -> str:
    return approval_path(approval_id) + "/decision"


def resolution_path(approval_id: str) -> str:
    return approval_path(approval_id) + "/resolution"


# -- time -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Moment:
    """A timestamp as the pages show it: absolute UTC, and how long ago."""

    iso: str
    absolute: str
    relative: str


def ago(seconds: float) -> str:
    """`42 s ago`, `5 min ago`, `3 h ago`, `2 d ago` (the script uses the same steps)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s ago"
    if s < 3600:
        return f"{s // 60} min ago"
    if s < 86400:
        return f"{s // 3600} h ago"
    return f"{s // 86400} d ago"


def moment(stamp: str | None, now: datetime | None = None) -> Moment | None:
    """The one time format of every page; None for a missing or unreadable stamp."""
    when = instant(stamp) if stamp else None
    if when is None:
        return None
    utc = when.astimezone(UTC)
    iso = utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    seconds = ((now or datetime.now(UTC)) - utc).total_seconds()
    return Moment(iso, utc.strftime("%Y-%m-%d %H:%M:%S UTC"), ago(seconds))


# -- arguments against the schema -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArgumentRow:
    """One argument as the reviewer reads it."""

    name: str
    value: str
    type: str
    unit: str | None = None
    hint: str | None = None
    description: str | None = None
    required: bool = False
    note: str | None = None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def _hint(value: Any, unit: str | None) -> str | None:
    """A reading aid beside a value in a unit: `= 12.50` for cents, `= 2 min 5 s` for seconds."""
    if not isinstance(value, int | float) or isinstance(value, bool) or unit is None:
        return None
    if unit == "cents":
        return f"= {value / 100:,.2f}"
    seconds = {"seconds": 1.0, "milliseconds": 1e-3, "minutes": 60.0, "hours": 3600.0}.get(unit)
    if seconds is not None:
        total = value * seconds
        if unit == "milliseconds" and total >= 1:
            return f"= {total:g} s"
        if total >= 60:
            minutes, rest = divmod(round(total), 60)
            hours, minutes = divmod(minutes, 60)
            parts = [f"{hours} h"] if hours else []
            parts += [f"{minutes} min"] if minutes else []
            parts += [f"{rest} s"] if rest else []
            return "= " + " ".join(parts)
    if unit == "bytes" and value >= 1024:
        size = float(value)
        for step in ("KiB", "MiB", "GiB", "TiB"):
            size /= 1024
            if size < 1024 or step == "TiB":
                return f"= {size:.1f} {step}"
    return None


def argument_rows(record: ApprovalRecord, tool: ToolInfo | None) -> list[ArgumentRow]:
    """Each argument of the call beside its schema: declared ones first, in order."""
    given = dict(record.arguments)
    rows: list[ArgumentRow] = []
    for arg in tool.arguments if tool else ():
        if arg.name in given:
            value = given.pop(arg.name)
            shown, note = _json(value), None
        elif arg.has_default:
            value, shown, note = arg.default, _json(arg.default), "not given: the default"
        else:
            value, shown, note = None, "", "missing"
        rows.append(
            ArgumentRow(
                name=arg.name,
                value=shown,
                type=arg.type,
                unit=arg.unit,
                hint=_hint(value, arg.unit),
                description=arg.description,
                required=arg.required,
                note=note,
            )
        )
    for name, value in given.items():
        unit = unit_of(name)
        note = None
        if tool is not None and not tool.any_keys:
            note = "not in the tool's schema"
        rows.append(
            ArgumentRow(name, _json(value), _json_type(value), unit, _hint(value, unit), note=note)
        )
    return rows


# -- what an approval shows -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Item:
    """An approval with everything its card or page shows."""

    record: ApprovalRecord
    tool: ToolInfo | None
    catalog_error: str | None
    rows: list[ArgumentRow]
    twins: Twins
    sent: bool

    @property
    def dom_id(self) -> str:
        return dom_id(self.record.approval_id)


def item_of(
    record: ApprovalRecord, catalog: Catalog, twins: Twins = NO_TWINS, sent: bool = False
) -> Item:
    tool = catalog.get(record.tool)
    rows = argument_rows(record, tool)
    return Item(record, tool, catalog.error, rows, twins, sent)


def outcome(record: ApprovalRecord) -> str:
    """What became of a decided approval, in a few words."""
    if record.state is ApprovalState.DENIED:
        return "denied"
    if record.state is ApprovalState.EXPIRED:
        return "expired, nobody decided in time"
    if record.state is ApprovalState.APPROVED:
        return "approved, not run yet"
    if record.state is ApprovalState.RUNNING:
        return "approved, running"
    if record.state is ApprovalState.UNKNOWN:
        return "approved, outcome unknown"
    if record.state is ApprovalState.DONE:
        reply = record.reply or {}
        if reply.get("status") == "ok":
            return "approved, ran ok"
        kind = (reply.get("error") or {}).get("kind", "error")
        return f"approved, failed ({kind})"
    return str(record.state)


@dataclass(frozen=True, slots=True)
class Event:
    """One step of an approval's history."""

    kind: str
    title: str
    tone: str = ""
    at: str | None = None
    untimed: str | None = None
    facts: list[tuple[str, str, bool]] = field(default_factory=list)
    body: str | None = None


def _seen_at(seen: Sequence[Seen], state: ApprovalState) -> str | None:
    return next((s.at for s in seen if s.state is state), None)


def history(record: ApprovalRecord, seen: Sequence[Seen]) -> list[Event]:
    """Parked (by which run and agent key), decided (by whom, when, why), ran, and the outcome.

    The record carries when it was parked and decided; when it started and finished running
    comes from the approvals topic, as long as compaction has kept those versions.
    """
    parked = [("Run", record.run_id, True), ("Call", record.call_id, True)]
    if record.agent_key is not None:
        parked.append(("Agent key", record.agent_key, True))
    if record.message_id:
        parked.append(("Delivered as", record.message_id, True))
    parked.append(("Origin", record.origin, True))
    events = [Event("parked", "Parked for review", "wait", record.requested_at, facts=parked)]
    state = record.state
    if state is ApprovalState.PENDING:
        events.append(Event("waiting", "Waiting for a decision", "wait"))
        return events
    if state is ApprovalState.EXPIRED:
        events.append(
            Event(
                "expired",
                "Expired: nobody decided in time; the caller got an ApprovalExpired error reply",
                "bad",
                record.settled_at,
            )
        )
        return events
    verdict = "Denied" if state is ApprovalState.DENIED else "Approved"
    events.append(
        Event(
            "decided",
            f"{verdict} by {record.reviewer or 'an unknown reviewer'}",
            "bad" if state is ApprovalState.DENIED else "ok",
            record.decided_at,
            facts=[("Reason", record.reason or "none given", False)],
        )
    )
    if state is ApprovalState.DENIED:
        events.append(Event("replied", "The caller got an ApprovalDenied error reply", "bad"))
        return events
    if record.resolution is not None:
        events += _resolved(record)
    if state is ApprovalState.APPROVED:
        events.append(Event("queued", "Approved; the call has not started yet", "wait"))
        return events
    if record.resolution == "ran":  # done by a person's finding, not by a run seen to end
        events.append(_outcome_event(record, seen))
        return events
    if state not in (ApprovalState.RUNNING, ApprovalState.DONE, ApprovalState.UNKNOWN):
        events.append(Event(str(state), f"Now {state}"))
        return events
    events.append(_ran(record, seen))
    if state is ApprovalState.RUNNING:
        events.append(
            Event("running", "No outcome yet: still running, or its worker died during the run")
        )
    elif state is ApprovalState.UNKNOWN:
        events.append(_unknown(record))
    else:
        events.append(_outcome_event(record, seen))
    return events


def _ran(record: ApprovalRecord, seen: Sequence[Seen]) -> Event:
    facts = [("Started by", record.started_by, True)] if record.started_by else []
    if record.runs > 1:
        title = f"Ran the call {record.runs} times (earlier runs died with their worker)"
        started = record.started_at
        untimed = None if started else "start time not recorded"
    else:
        title = "Ran the call"
        started = record.started_at or _seen_at(seen, ApprovalState.RUNNING)
        untimed = None if started else "start time no longer on the topic"
    return Event("ran", title, "ok", started, untimed, facts=facts)


def _unknown(record: ApprovalRecord) -> Event:
    return Event(
        "unknown",
        "Outcome unknown: the run ended with its worker, and it does not run again by itself",
        "bad",
        record.unknown_at,
        facts=[
            (
                "To do",
                "find out whether it ran, then resolve it on this page, or with "
                f"stream-adapter approvals resolve {record.approval_id} --ran (with --result) "
                "or --not-run (runs it once more)",
                False,
            )
        ],
    )


def _resolved(record: ApprovalRecord) -> list[Event]:
    """An unknown outcome and a person's finding about it."""
    unknown = Event(
        "unknown",
        "Ran the call; its outcome was unknown (the run ended with its worker)",
        "bad",
        untimed="time not kept",
    )
    finding = "it ran" if record.resolution == "ran" else "it did not run: run it once more"
    resolved = Event(
        "resolved",
        f"Resolved by {record.resolved_by or 'an unknown reviewer'}: {finding}",
        "ok",
        record.resolved_at,
        facts=[("Reason", record.resolution_reason or "none given", False)],
    )
    return [unknown, resolved]


def _outcome_event(record: ApprovalRecord, seen: Sequence[Seen]) -> Event:
    finished = _seen_at(seen, ApprovalState.DONE)
    untimed = None if finished else "end time no longer on the topic"
    reply = record.reply or {}
    if reply.get("status") == "ok":
        body = json.dumps(reply.get("result"), indent=2, ensure_ascii=False, sort_keys=True)
        title = "Finished: ok" + (" (as the reviewer reported)" if reply.get("resolved_by") else "")
        return Event("outcome", title, "ok", finished, untimed, body=body)
    error = reply.get("error") or {}
    facts = [
        (label, str(error[key]), False)
        for label, key in (("Kind", "kind"), ("Status", "status"), ("Detail", "detail"))
        if key in error
    ]
    title = f"Failed: {error.get('kind', 'error')}"
    return Event("outcome", title, "bad", finished, untimed, facts=facts)


# -- rendering --------------------------------------------------------------------------------


def _static(name: str) -> Markup:
    """A file shipped beside the templates, inlined as is (it is ours, not user input)."""
    text = resources.files("stream_adapter.review").joinpath("static", name).read_text("utf-8")
    return Markup(text)


ENV = Environment(
    loader=PackageLoader("stream_adapter.review", "templates"),
    autoescape=select_autoescape(["html"], default_for_string=True, default=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.globals.update(
    approval_path=approval_path,
    decision_path=decision_path,
    resolution_path=resolution_path,
    moment=moment,
    outcome=outcome,
)
_CSS = _static("review.css")
_JS = _static("review.js")


def _render(template: str, **context: Any) -> str:
    return ENV.get_template(template).render(css=_CSS, js=_JS, **context)


def login_page(csrf: str, nonce: str, *, error: str | None = None) -> str:
    """The login form (the body of every 401 a browser gets)."""
    return _render(
        "login.html",
        title="Sign in: approvals review",
        nonce=nonce,
        script=False,
        csrf=csrf,
        error=error,
    )


def board_fragment(
    page: Page,
    twins: Callable[[str], Twins],
    recent: Sequence[ApprovalRecord],
    catalog: Catalog,
    *,
    csrf: str,
    sent: Collection[str] = (),
    back: str = "/",
    unknown: Page | None = None,
    refused: Mapping[str, str] | None = None,
) -> str:
    """The live part of the board: approved calls whose outcome is unknown (the first page of
    those matching the search), one page of pending approvals, and the recent decisions.

    `twins` names the pending approvals identical to one (asked for the page's items only).
    """
    items = [item_of(r, catalog, twins(r.approval_id), r.approval_id in sent) for r in page.items]
    unknown = unknown or page_of([], page.query)
    unknown_items = [item_of(r, catalog, sent=r.approval_id in sent) for r in unknown.items]
    count = page.total
    summary = f"{count} pending approval{'' if count == 1 else 's'}"
    if page.query:
        summary += f", {page.matched} matching"
    if unknown.total:
        summary += f"; {unknown.total} with an unknown outcome"

    def page_url(number: int) -> str:
        params = {"q": page.query} if page.query else {}
        if number > 1:
            params["page"] = str(number)
        return "/" + (f"?{urlencode(params)}" if params else "")

    return _render(
        "board.html",
        page=page,
        items=items,
        unknown=unknown,
        unknown_items=unknown_items,
        recent=list(recent),
        summary=summary,
        csrf=csrf,
        back=back,
        page_url=page_url,
        refused=dict(refused or {}),
    )


def main_page(
    reviewer: str,
    csrf: str,
    nonce: str,
    fragment: str,
    version: int,
    *,
    query: str = "",
    live_url: str = "/live",
    notice: str | None = None,
    alert: str | None = None,
) -> str:
    """The approvals board for a signed-in reviewer."""
    return _render(
        "index.html",
        title="Approvals review",
        nonce=nonce,
        script=True,
        reviewer=reviewer,
        csrf=csrf,
        fragment=Markup(fragment),  # rendered (and escaped) by board_fragment
        version=version,
        query=query,
        live_url=live_url,
        notice=notice,
        alert=alert,
    )


def detail_fragment(
    record: ApprovalRecord,
    seen: Sequence[Seen],
    twins: Callable[[str], Twins],
    catalog: Catalog,
    *,
    csrf: str,
    sent: bool = False,
    refused: str | None = None,
) -> str:
    """The live part of an approval's page: the call, its decision form, its history, and
    why the worker refuses what was sent from here (`refused`), if it does."""
    raw = json.dumps(
        record.model_dump(mode="json", exclude_none=True), indent=2, ensure_ascii=False
    )
    return _render(
        "detail.html",
        item=item_of(record, catalog, twins(record.approval_id), sent),
        events=history(record, seen),
        raw=raw,
        csrf=csrf,
        back=approval_path(record.approval_id),
        refused=refused,
    )


def approval_page(
    reviewer: str,
    csrf: str,
    nonce: str,
    fragment: str,
    version: int,
    *,
    approval_id: str,
    share_url: str,
    notice: str | None = None,
    alert: str | None = None,
) -> str:
    """One approval's own page, under a link that stays the same for its whole life."""
    return _render(
        "approval.html",
        title=f"Approval {approval_id}",
        nonce=nonce,
        script=True,
        reviewer=reviewer,
        csrf=csrf,
        fragment=Markup(fragment),  # rendered (and escaped) by detail_fragment
        version=version,
        live_url="/live?" + urlencode({"approval": approval_id}),
        share_url=share_url,
        notice=notice,
        alert=alert,
    )


def missing_page(reviewer: str, csrf: str, nonce: str, approval_id: str) -> str:
    """The page of an approval the table does not have."""
    return _render(
        "missing.html",
        title="No such approval",
        nonce=nonce,
        script=False,
        reviewer=reviewer,
        csrf=csrf,
        approval_id=approval_id,
    )
