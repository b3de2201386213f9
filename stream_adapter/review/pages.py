"""Server-rendered HTML: the login form, the approvals page and its live fragment.

Plain forms work without JavaScript; a few lines of inline script long-poll `/live` and swap the
live fragment in, keeping a half-typed reason and the focus. Everything dynamic is escaped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from datetime import UTC, datetime
from html import escape
from urllib.parse import quote

from stream_adapter.approvals import ApprovalRecord, ApprovalState

_CSS = """
body{font-family:system-ui,sans-serif;margin:0;color:#1b1b1b;background:#f6f6f4;line-height:1.45}
header,main{max-width:62rem;margin:0 auto;padding:1rem}
header{display:flex;justify-content:space-between;align-items:center;gap:1rem}
h1{font-size:1.5rem;margin:0}h2{font-size:1.2rem;margin-top:2rem}
h3{font-size:1.05rem;margin:0 0 .5rem}
article{background:#fff;border:1px solid #ccc;border-radius:6px;padding:1rem;margin:.75rem 0}
pre{background:#f0f0ee;padding:.75rem;overflow:auto;border-radius:4px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:0 0 .5rem}
dt{font-weight:600}dd{margin:0;font-family:ui-monospace,monospace;word-break:break-all}
form.decide{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end}
label{display:block;font-weight:600}input[type=text],input[type=password]{padding:.4rem;min-width:18rem}
button{padding:.45rem 1rem;border-radius:4px;border:1px solid #555;cursor:pointer;font-size:1rem}
button.approve{background:#1d6b2f;color:#fff}button.deny{background:#9b1c1c;color:#fff}
button:focus-visible,input:focus-visible{outline:3px solid #1a5fb4;outline-offset:2px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #ccc;padding:.35rem .5rem;text-align:left}
.notice{background:#e4f2e7;border:1px solid #1d6b2f;padding:.6rem;border-radius:4px}
.alert{background:#fbe9e9;border:1px solid #9b1c1c;padding:.6rem;border-radius:4px}
.muted{color:#555}.vh{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
"""

_SCRIPT = """
(() => {
  const live = document.getElementById("live"), status = document.getElementById("live-status");
  let version = Number(live.dataset.version);
  const pause = (ms) => new Promise((r) => setTimeout(r, ms));
  function ages() {
    for (const t of live.querySelectorAll("time[data-age]")) {
      const s = Math.max(0, Math.round((Date.now() - Date.parse(t.dateTime)) / 1000));
      t.textContent = s < 60 ? s + " s ago" : s < 3600 ? Math.floor(s / 60) + " min ago"
        : Math.floor(s / 3600) + " h ago";
    }
  }
  function swap(html) {
    const kept = {}, focused = document.activeElement && document.activeElement.id;
    for (const i of live.querySelectorAll("input[name=reason]")) kept[i.id] = i.value;
    live.innerHTML = html;
    for (const [id, v] of Object.entries(kept)) {
      const i = document.getElementById(id); if (i) i.value = v;
    }
    if (focused) { const f = document.getElementById(focused); if (f) f.focus(); }
    const summary = live.querySelector("[data-summary]");
    if (summary) status.textContent = summary.dataset.summary;
    ages();
  }
  async function poll() {
    for (;;) {
      try {
        const r = await fetch("/live?since=" + version, {credentials: "same-origin"});
        if (r.status === 401) { location.reload(); return; }
        if (!r.ok) { await pause(2000); continue; }
        const v = Number(r.headers.get("X-View-Version"));
        if (v !== version) { swap(await r.text()); version = v; }
      } catch (e) { await pause(2000); }
    }
  }
  setInterval(ages, 10000); ages(); poll();
})();
"""


def dom_id(approval_id: str) -> str:
    """A safe, stable element id for an approval."""
    return "a-" + hashlib.blake2b(approval_id.encode(), digest_size=6).hexdigest()


def decision_path(approval_id: str) -> str:
    return f"/approvals/{quote(approval_id, safe='')}/decision"


def _age(timestamp: str, now: datetime) -> str:
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return ""
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def _time(timestamp: str | None, now: datetime, *, age: bool = False) -> str:
    if not timestamp:
        return ""
    text = _age(timestamp, now) if age else timestamp
    data = " data-age" if age else ""
    stamp = escape(timestamp)
    return f'<time datetime="{stamp}"{data} title="{stamp}">{escape(text)}</time>'


def layout(title: str, body: str, nonce: str, *, script: bool = False) -> str:
    """A whole document; inline style and script carry the response's CSP nonce."""
    js = f'<script nonce="{escape(nonce)}">{_SCRIPT}</script>' if script else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{escape(title)}</title><style nonce="{escape(nonce)}">{_CSS}</style></head>'
        f"<body>{body}{js}</body></html>"
    )


def login_page(csrf: str, nonce: str, *, error: str | None = None) -> str:
    """The login form (the body of every 401 a browser gets)."""
    alert = f'<p class="alert" role="alert">{escape(error)}</p>' if error else ""
    body = f"""<header><h1>Approvals review: sign in</h1></header>
<main>{alert}
<form method="post" action="/login">
  <input type="hidden" name="csrf" value="{escape(csrf)}">
  <p><label for="token">Reviewer token</label>
  <input id="token" name="token" type="password" autocomplete="off" required
    aria-describedby="token-help"></p>
  <p id="token-help" class="muted">The token printed by
    <code>stream-adapter reviewers add</code>.</p>
  <p><button type="submit">Sign in</button></p>
</form></main>"""
    return layout("Sign in: approvals review", body, nonce)


def _pending_item(record: ApprovalRecord, csrf: str, now: datetime, sent: bool) -> str:
    did = dom_id(record.approval_id)
    arguments = json.dumps(record.arguments, indent=2, sort_keys=True, ensure_ascii=False)
    if sent:
        action = '<p class="notice" role="status">Decision sent; waiting for the worker.</p>'
    else:
        path = escape(decision_path(record.approval_id))
        action = f"""<form class="decide" method="post" action="{path}">
  <input type="hidden" name="csrf" value="{escape(csrf)}">
  <div><label for="reason-{did}">Reason (optional)</label>
  <input id="reason-{did}" name="reason" type="text" maxlength="4096"></div>
  <button class="approve" type="submit" name="decision" value="approve" id="approve-{did}"
    aria-describedby="title-{did}">Approve</button>
  <button class="deny" type="submit" name="decision" value="deny" id="deny-{did}"
    aria-describedby="title-{did}">Deny</button>
</form>"""
    aid = escape(record.approval_id)
    return f"""<article id="{did}" data-approval-id="{aid}" aria-labelledby="title-{did}">
<h3 id="title-{did}">{escape(record.tool)} <span class="muted">({aid})</span></h3>
<dl><dt>Run</dt><dd>{escape(record.run_id)}</dd><dt>Call</dt><dd>{escape(record.call_id)}</dd>
<dt>Requested</dt><dd>{_time(record.requested_at, now, age=True)}</dd></dl>
<p class="vh" id="args-{did}">Arguments</p>
<pre aria-labelledby="args-{did}"><code>{escape(arguments)}</code></pre>
{action}</article>"""


def _outcome(record: ApprovalRecord) -> str:
    if record.state is ApprovalState.DENIED:
        return "denied"
    if record.state in (ApprovalState.APPROVED, ApprovalState.RUNNING):
        return "approved, running"
    if record.state is ApprovalState.UNKNOWN:
        return "approved, outcome unknown"
    reply = record.reply or {}
    if reply.get("status") == "ok":
        return "approved, ran ok"
    kind = (reply.get("error") or {}).get("kind", "error")
    return f"approved, failed ({kind})"


def live_fragment(
    pending: list[ApprovalRecord],
    recent: list[ApprovalRecord],
    *,
    csrf: str,
    sent: Collection[str] = (),
    now: datetime | None = None,
) -> str:
    """The part of the page that live updates replace: pending approvals and recent decisions."""
    now = now or datetime.now(UTC)
    count = len(pending)
    summary = f"{count} pending approval{'' if count == 1 else 's'}"
    items = "".join(_pending_item(r, csrf, now, r.approval_id in sent) for r in pending)
    if not items:
        items = '<p class="muted">Nothing is waiting for a decision.</p>'
    rows = "".join(
        f'<tr><td>{escape(r.tool)} <span class="muted">{escape(r.approval_id)}</span></td>'
        f"<td>{escape(r.reviewer or '')}</td><td>{escape(_outcome(r))}</td>"
        f"<td>{_time(r.decided_at, now)}</td></tr>"
        for r in recent
    )
    table = (
        '<table><caption class="vh">Recent decisions</caption><thead><tr><th scope="col">'
        'Approval</th><th scope="col">Reviewer</th><th scope="col">Outcome</th>'
        f'<th scope="col">Decided</th></tr></thead><tbody>{rows}</tbody></table>'
        if rows
        else '<p class="muted">No decisions yet.</p>'
    )
    return (
        f'<section aria-labelledby="pending-h" data-summary="{escape(summary)}">'
        f'<h2 id="pending-h">Pending approvals ({count})</h2>{items}</section>'
        '<section aria-labelledby="recent-h"><h2 id="recent-h">Recent decisions</h2>'
        f"{table}</section>"
    )


NOTICES = {
    "approved": "Approved: the call runs now.",
    "denied": "Denied: the caller gets an ApprovalDenied reply.",
    "sent": "Decision sent; the worker has not shown it yet.",
}


def main_page(
    reviewer: str,
    csrf: str,
    nonce: str,
    fragment: str,
    version: int,
    *,
    notice: str | None = None,
    alert: str | None = None,
) -> str:
    """The approvals page for a signed-in reviewer."""
    banner = ""
    if alert:
        banner = f'<p class="alert" role="alert" id="message">{escape(alert)}</p>'
    elif notice:
        banner = f'<p class="notice" role="status" id="message">{escape(notice)}</p>'
    body = f"""<header><h1>Approvals review</h1>
<form method="post" action="/logout"><input type="hidden" name="csrf" value="{escape(csrf)}">
<span class="muted">Signed in as <strong>{escape(reviewer)}</strong></span>
<button type="submit">Sign out</button></form></header>
<main>{banner}
<p id="live-status" role="status" aria-live="polite" class="muted"></p>
<div id="live" data-version="{version}">{fragment}</div></main>"""
    return layout("Approvals review", body, nonce, script=True)
